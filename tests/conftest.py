"""Shared fixtures."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_random_model(tmp_path_factory) -> Path:
    """Return the path of an untrained tiny Qwen2 model (built once per session; loads in vLLM and transformers)."""
    from precision_rl.tiny.model import build_random_model

    return build_random_model(tmp_path_factory.mktemp("tiny_model") / "random")
