"""Fixtures of the analysis tests."""

import importlib.util

import pytest

from precision_rl.paths import REPO_ROOT


@pytest.fixture
def load_benchmark():
    """Return a function that imports ``benchmarks/<name>.py`` (a script, not a package) and returns the module."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
