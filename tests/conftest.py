"""Shared fixtures."""

from pathlib import Path

import pytest

from precision_rl import paths


@pytest.fixture(autouse=True, scope="session")
def no_published_logs(tmp_path_factory):
    """Keep the repository's published logs (results/logs) out of every test's run tables, and its calibration runs
    (results/calibration) out of every test's ETA."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(paths.LOGS_ENV, str(tmp_path_factory.getbasetemp() / "no-published-logs"))
        patch.setenv(paths.CALIBRATION_ENV, str(tmp_path_factory.getbasetemp() / "no-calibration-runs"))
        yield


@pytest.fixture(scope="session")
def tiny_random_model(tmp_path_factory) -> Path:
    """Return the path of an untrained tiny Qwen2 model (built once per session; loads in vLLM and transformers)."""
    from precision_rl.tiny.model import build_random_model

    return build_random_model(tmp_path_factory.mktemp("tiny_model") / "random")


_SESSION_STARTED: list[float] = []


def pytest_sessionstart(session):
    """Note when the session started, for the test record."""
    import time

    _SESSION_STARTED.append(time.time())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Where PRECISION_RL_TEST_RECORD names a file, write this tier's record there (the controller only, under
    xdist): counts, seconds, the CPU and the commit (precision_rl.analysis.test_record)."""
    import os
    import time

    target = os.environ.get("PRECISION_RL_TEST_RECORD")
    if not target or hasattr(config, "workerinput"):
        return
    from precision_rl.analysis.test_record import TIER_ENV, session_record
    from precision_rl.fileio import atomic_write_json
    from precision_rl.launch import runs

    counts = {key: len(terminalreporter.stats.get(key, [])) for key in ("passed", "failed", "skipped", "error")}
    started = _SESSION_STARTED[0] if _SESSION_STARTED else time.time()
    record = session_record(os.environ.get(TIER_ENV, "unnamed"), counts, time.time() - started, int(exitstatus),
                            runs.hardware(), runs.git_state(), runs.utc_stamp())
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(target), record)
