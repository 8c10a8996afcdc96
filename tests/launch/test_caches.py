"""A run's compile caches: its own, seeded from the project's copies, and what a finished attempt adds to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precision_rl import paths
from precision_rl.config.registry import load_experiment
from precision_rl.config.scale import ScaleDecision
from precision_rl.launch import caches
from precision_rl.launch import runner as launch


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    return tmp_path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_an_attempt_starts_from_the_shared_caches_and_adds_only_what_they_lack(isolated):
    temp = isolated / "attempt"
    _write(paths.inductor_cache_root() / "ab" / "kernel.so", "compiled")
    _write(paths.inductor_cache_root() / "locks" / "ab.lock", "")
    _write(paths.inductor_cache_root() / "fxgraph" / ".entry.123.tmp", "half")
    _write(paths.vllm_cache_root() / "modelinfos" / "model.json", "{}")
    _write(paths.vllm_cache_root() / "torch_compile_cache" / "graph", "per model and shape")
    assert caches.seed_attempt_caches(temp) == 2
    env = caches.attempt_cache_env(temp)
    own_inductor, own_vllm = Path(env[caches.INDUCTOR_ENV]), Path(env[caches.VLLM_ENV])
    assert own_inductor.is_relative_to(temp) and own_vllm.is_relative_to(temp)
    assert (own_inductor / "ab" / "kernel.so").read_text() == "compiled"
    assert (own_vllm / "modelinfos" / "model.json").exists()
    assert not (own_inductor / "locks").exists() and not (own_vllm / "torch_compile_cache").exists()

    _write(own_inductor / "ab" / "kernel.so", "recompiled")
    _write(own_inductor / "cd" / "new.so", "new")
    _write(own_inductor / "cd" / ".new.so.99.tmp", "half")
    _write(own_vllm / "modelinfos" / "other.json", "{}")
    assert caches.keep_new_entries(temp) == 2
    assert (paths.inductor_cache_root() / "ab" / "kernel.so").read_text() == "compiled"  # never overwritten
    assert (paths.inductor_cache_root() / "cd" / "new.so").read_text() == "new"
    assert not (paths.inductor_cache_root() / "cd" / ".new.so.99.tmp").exists()
    assert (paths.vllm_cache_root() / "modelinfos" / "other.json").exists()
    assert caches.seed_attempt_caches(isolated / "empty") == 4 and caches.keep_new_entries(isolated / "empty") == 0


# A stand-in for verl: reads the seeded entry, writes a new one into each cache, exits with CODE.
STAND_IN = ("import os, pathlib, sys; i = pathlib.Path(os.environ['TORCHINDUCTOR_CACHE_DIR']); "
            "v = pathlib.Path(os.environ['VLLM_CACHE_ROOT']) / 'modelinfos'; "
            "print('seeded:' + (i / 'ab' / 'kernel.so').read_text()); "
            "(i / 'NAME').mkdir(parents=True); (i / 'NAME' / 'k.so').write_text('x'); "
            "v.mkdir(parents=True, exist_ok=True); (v / 'NAME.json').write_text('{}'); sys.exit(CODE)")


@pytest.mark.parametrize("code,kept", [(0, True), (1, False)])
def test_a_finished_attempt_adds_its_entries_and_a_failed_one_adds_none(isolated, code, kept):
    _write(paths.inductor_cache_root() / "ab" / "kernel.so", "compiled")
    spec = load_experiment("sanity/grpo")
    for name, split in [(spec.data.train, "train")] + [(v, "test") for v in spec.data.val]:
        _write(isolated / "data" / name / f"{split}.parquet", "PAR1")
    plan = launch.plan_run(spec, spec.arm("fp16"), ScaleDecision("paper", "paper", "test"), launch.RunOptions())
    plan.argv = ["python", "-c", STAND_IN.replace("NAME", f"new{code}").replace("CODE", str(code))]
    assert launch.execute(plan) == code
    assert "seeded:compiled" in (plan.run_dir / "train.log").read_text()
    assert (paths.inductor_cache_root() / f"new{code}" / "k.so").exists() is kept
    assert (paths.vllm_cache_root() / "modelinfos" / f"new{code}.json").exists() is kept
    assert not plan.ray_temp_dir.exists()


def test_torch_would_keep_its_compile_caches_under_tmpdir_which_the_run_points_elsewhere_or_turns_off(isolated):
    """torch 2.13 puts TorchInductor's cache under TMPDIR (``torch._inductor.runtime.cache_dir_utils.default_cache_dir``),
    which a run points at its attempt's temp folder: TORCHINDUCTOR_CACHE_DIR, which the run sets to its seeded cache,
    wins. The header torch precompiles for its C++ kernels stays under TMPDIR whatever that variable says
    (``torch._inductor.codecache._HEADER_DIR``) and is built before a kernel is looked up (``CppCodeCache.load``):
    the run's environment turns the precompiling off (``config.cpp_cache_precompile_headers``), so that a warm cache
    compiles nothing."""
    temp = isolated / "attempt"
    temp.mkdir()
    env = caches.attempt_cache_env(temp)
    probe = ("import json; from torch._inductor import codecache, config; "
             "from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir; "
             "print(json.dumps([default_cache_dir(), cache_dir(), codecache._HEADER_DIR, "
             "config.cpp_cache_precompile_headers]))")
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "TMPDIR": str(temp), **env},
                         capture_output=True, text=True, check=True)
    default, chosen, header_dir, precompiles = json.loads(out.stdout)
    assert Path(default).is_relative_to(temp) and Path(chosen) == Path(env[caches.INDUCTOR_ENV])
    assert Path(header_dir).is_relative_to(default) and not Path(header_dir).is_relative_to(chosen)
    assert precompiles is False
