"""Shared fixtures."""

from pathlib import Path

import pytest

from precision_rl import paths


@pytest.fixture(autouse=True, scope="session")
def no_published_logs(tmp_path_factory):
    """Keep the repository's published logs (results/logs) out of every test's run tables."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(paths.LOGS_ENV, str(tmp_path_factory.getbasetemp() / "no-published-logs"))
        yield


@pytest.fixture(scope="session")
def tiny_random_model(tmp_path_factory) -> Path:
    """Return the path of an untrained tiny Qwen2 model (built once per session; loads in vLLM and transformers)."""
    from precision_rl.tiny.model import build_random_model

    return build_random_model(tmp_path_factory.mktemp("tiny_model") / "random")
