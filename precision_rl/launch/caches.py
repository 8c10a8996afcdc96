"""The compile caches a run starts from and adds to: TorchInductor's kernels and vLLM's records of model classes.

A run attempt works in caches of its own, inside its temp folder, seeded from the project's shared copies
(``paths.inductor_cache_root``, ``paths.vllm_cache_root``) when it starts; a finished attempt adds the entries it
made to the shared copies. No two runs write one cache at the same time (three concurrent cold compiles into one
TorchInductor cache hung a run), yet a run after the first neither compiles verl's ``torch.compile``d log-prob and
entropy functions again with a C++ compiler nor lets vLLM's model registry inspect the model class in a subprocess
that imports torch and vLLM again (``vllm.model_executor.models.registry._LazyRegisteredModel``, vLLM 0.32).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from precision_rl.paths import inductor_cache_root, vllm_cache_root

INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
VLLM_ENV = "VLLM_CACHE_ROOT"
# torch 2.13 keeps the C++ header it precompiles for CPU kernels under TMPDIR, not under TORCHINDUCTOR_CACHE_DIR
# (``torch._inductor.codecache._HEADER_DIR``), and ``CppCodeCache.load`` builds it (~10 CPU-s) before it finds the
# kernel's library in the cache: with a temp folder per attempt every run would build it again. Without the
# precompiled header a cold compile of verl's two functions cost no more (22 CPU-s against 25, 2-core AVX2 EPYC) and
# a warm one compiles nothing.
PRECOMPILED_HEADERS_ENV = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"
# vLLM's cache root also holds its torch.compile cache, which CPU runs never fill (enforce_eager) and GPU runs fill
# per model and shape; only the model-class records are worth carrying from run to run.
VLLM_SHARED_PARTS = ("modelinfos",)
LOCK_SUFFIXES = (".lock", ".tmp")


def attempt_cache_env(temp: Path) -> dict[str, str]:
    """Return the environment variables that point TorchInductor and vLLM at the attempt's own caches in ``temp``
    (and keep TorchInductor from precompiling a header there that no later attempt would find)."""
    return {INDUCTOR_ENV: str(temp / "torchinductor"), VLLM_ENV: str(temp / "vllm"), PRECOMPILED_HEADERS_ENV: "0"}


def _pairs(temp: Path) -> list[tuple[Path, Path]]:
    """Return (shared folder, the attempt's folder) for every cached part."""
    env = attempt_cache_env(temp)
    return [(inductor_cache_root(), Path(env[INDUCTOR_ENV]))] + \
        [(vllm_cache_root() / part, Path(env[VLLM_ENV]) / part) for part in VLLM_SHARED_PARTS]


def _entries(folder: Path):
    """Yield the cache files under ``folder`` (relative paths), lock and temp files left out."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.endswith(LOCK_SUFFIXES) and "locks" not in path.relative_to(folder).parts:
            yield path.relative_to(folder)


def seed_attempt_caches(temp: Path) -> int:
    """Copy the shared caches into the attempt's own in ``temp``; return the number of files copied."""
    copied = 0
    for shared, own in _pairs(temp):
        for entry in _entries(shared) if shared.is_dir() else ():
            (own / entry).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(shared / entry, own / entry)
            copied += 1
    return copied


def keep_new_entries(temp: Path) -> int:
    """Add the entries the attempt's caches in ``temp`` hold and the shared ones lack to the shared caches, each file
    written under a temporary name and renamed into place (a reader never sees half a file); return how many."""
    added = 0
    for shared, own in _pairs(temp):
        for entry in _entries(own) if own.is_dir() else ():
            target = shared / entry
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            os.close(handle)
            shutil.copy2(own / entry, partial)
            os.replace(partial, target)
            added += 1
    return added
