"""Shared fixtures: one untrained tiny model per test session."""

import pytest

from precision_rl.tiny.model import build_random_model


@pytest.fixture(scope="session")
def tiny_random_model(tmp_path_factory):
    return build_random_model(tmp_path_factory.mktemp("tiny") / "model")
