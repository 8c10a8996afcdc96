"""Every root directory the suite reads or writes, each overridable by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

from precision_rl import REPO_ROOT

DATA_ENV = "PRECISION_RL_DATA"
RUNS_ENV = "PRECISION_RL_RUNS"
CACHE_ENV = "PRECISION_RL_CACHE"


def data_root() -> Path:
    """Return the dataset root (``$PRECISION_RL_DATA`` or ``<repo>/data``)."""
    return Path(os.environ.get(DATA_ENV, REPO_ROOT / "data")).resolve()


def runs_root() -> Path:
    """Return the root of all run directories (``$PRECISION_RL_RUNS`` or ``<repo>/runs``)."""
    return Path(os.environ.get(RUNS_ENV, REPO_ROOT / "runs")).resolve()


def cache_root() -> Path:
    """Return the project cache (``$PRECISION_RL_CACHE`` or ``<repo>/.cache``): tiny models, vLLM's cache."""
    return Path(os.environ.get(CACHE_ENV, REPO_ROOT / ".cache")).resolve()


def vllm_cache_root() -> Path:
    """Return the folder vLLM caches into (``VLLM_CACHE_ROOT`` for every run the suite starts)."""
    return cache_root() / "vllm"
