"""The paper-scale preflight: every check on this CPU machine (the GPU lines fail with their reason), each failure's
fix, and a paper-scale run that stops on a failed line before anything starts."""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from precision_rl import cli, paths
from precision_rl.config.registry import load_experiment
from precision_rl.config.scale import ScaleDecision
from precision_rl.launch import preflight as P
from precision_rl.locks import GPU_PINS, pinned_versions

CHECKS = ["GPUs", "GPU memory", "driver / CUDA", *(f"{p} version" for p in P.LOCKED_PACKAGES), "model",
          "dataset sanity", "dataset aime24", "dataset aime25", "disk", "NCCL all-reduce", "expected wall time"]
H100 = ("NVIDIA H100 80GB HBM3", 85_000_000_000)


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))


def _target(gpus=8) -> P.Target:
    return P.Target(load_experiment("sanity/grpo", "paper"), gpus, 1)


def _by_check(lines) -> dict[str, P.Line]:
    return {line.check: line for line in lines}


def test_on_this_cpu_machine_every_line_is_there_and_each_gpu_line_fails_with_its_reason(tmp_path, capsys):
    assert cli.main(["preflight", "sanity/grpo"]) == 1
    out = capsys.readouterr().out
    lines = _by_check(P.preflight(_target(), devices=[]))
    assert list(lines) == CHECKS and all(check in out for check in CHECKS)
    for check in ("GPUs", "GPU memory", "NCCL all-reduce"):
        assert lines[check].status == P.FAIL and "no CUDA GPU" in lines[check].found and lines[check].fix
    assert lines["driver / CUDA"].status == P.FAIL and "nvidia-smi" in lines["driver / CUDA"].found
    assert lines["model"].status == P.FAIL and "HF_HUB_OFFLINE" in lines["model"].found
    assert lines["dataset sanity"].fix == "make data DATA='sanity'"
    assert lines["verl version"].status == P.PASS  # the one package both environments pin alike
    assert out.rstrip().splitlines()[-1].startswith("12 check(s) failed: GPUs, GPU memory")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()  # it writes nothing


def test_gpus_too_few_or_too_small_fail_and_enough_pass():
    assert P.check_gpus(_target(), [H100] * 8).status == P.PASS
    few = P.check_gpus(_target(), [H100] * 4)
    assert few.status == P.FAIL and "asks 8 per node" in few.found and "GPUS=4" in few.fix
    small = P.check_gpu_memory([("NVIDIA A10G", 24_000_000_000)] * 8)
    assert small.status == P.FAIL and "24 GB" in small.found and "80 GB" in small.fix
    assert P.check_gpu_memory([H100] * 8).status == P.PASS


def test_a_package_off_the_gpu_lock_names_the_pinned_version():
    pins = pinned_versions(*GPU_PINS)
    lines = _by_check(P.check_packages(lambda name: "0.8.0" if name == "verl" else pins.get(name)))
    assert lines["verl version"].status == P.FAIL and lines["verl version"].fix.startswith(f"pip install verl=={pins['verl']}")
    assert lines["torch version"].status == P.PASS and lines["flash-attn version"].status == P.PASS
    assert _by_check(P.check_packages(lambda name: None))["vllm version"].found == f"not installed (gpu.lock: {pins['vllm']})"


def _dataset(root, name, split, rows):
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"prompt": [f"q{i}" for i in range(rows)]}), folder / f"{split}.parquet")
    return folder / f"{split}.parquet"


def test_datasets_are_checked_for_rows_and_the_checksum_they_were_built_with(tmp_path):
    from precision_rl.fileio import sha256_file

    root = tmp_path / "data"
    spec = load_experiment("sanity/grpo", "paper")
    _dataset(root, "sanity", "train", 1460)
    aime24 = _dataset(root, "aime24", "test", 30)
    _dataset(root, "aime25", "test", 29)
    (root / "MANIFEST.json").write_text(json.dumps({"aime24": {"files": {"test.parquet": {"sha256": sha256_file(aime24)}}},
                                                    "sanity": {"files": {"train.parquet": {"sha256": "0" * 64}}}}))
    lines = _by_check(P.check_datasets(spec, root))
    assert lines["dataset aime24"].status == P.PASS and "30 rows" in lines["dataset aime24"].found
    assert lines["dataset sanity"].status == P.FAIL and "checksum differs" in lines["dataset sanity"].found
    assert lines["dataset aime25"].status == P.FAIL and "29 rows, the recipe expects 30" in lines["dataset aime25"].found
    (root / "MANIFEST.json").unlink()
    assert _by_check(P.check_datasets(spec, root))["dataset aime24"].status == P.UNKNOWN


def test_the_disk_must_hold_two_checkpoints_of_a_local_model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 3_000_000_000}}))
    spec = dataclasses.replace(load_experiment("sanity/grpo", "paper"), model=str(model))
    need = 2 * 1_500_000_000 * P.CHECKPOINT_BYTES_PER_PARAM
    assert P.check_disk(spec, tmp_path / "runs", lambda _: need - 1).status == P.FAIL
    fits = P.check_disk(spec, tmp_path / "runs", lambda _: need)
    assert fits.status == P.PASS and "1.5B parameters" in fits.found and f"~{need / 1e9:.0f} GB" in fits.found


def test_a_paper_scale_run_stops_on_a_failed_preflight_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "resolve_scale", lambda requested, dry_run=False: ScaleDecision(requested, "paper", "test"))
    assert cli.main(["run", "sanity/grpo", "--scale", "paper", "--precision", "fp16"]) == 1
    err = capsys.readouterr().err
    assert "preflight of sanity/grpo at paper scale" in err and err.rstrip().splitlines()[-1].startswith(
        "error: the preflight failed")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv, message", [
    (["preflight", "sanity/nope"], "sanity/nope"),
    (["preflight", "sanity/grpo", "--gpus", "0"], "GPUS must be a positive integer"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
