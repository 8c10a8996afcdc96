"""Other verl runs on the machine: a run says what runs beside it when it starts, and records what shared the machine
and the least memory left, so that a run killed for memory beside another says why."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from precision_rl.launch import neighbours, runs
from precision_rl.launch import runner as launch
from tests.launch.test_runner import _fake_verl, _paper_plan, isolated  # noqa: F401 - autouse: runs/ and data/ under tmp_path


@pytest.mark.parametrize("cmdline,is_run", [
    ([".venv/bin/python", "-m", "precision_rl", "run", "ladder/grpo", "--precision", "fp16"], True),
    (["/x/site-packages/ray/core/src/ray/raylet/raylet", "--node_ip_address=1.2.3.4"], True),
    (["/x/site-packages/ray/core/src/ray/gcs/gcs_server", "--port=1"], True),
    ([".venv/bin/python", "-m", "precision_rl", "grid", "sanity/*"], False),
    ([".venv/bin/python", "-m", "precision_rl.launch.guardian", "run"], False),
    ([".venv/bin/python", "-m", "pytest", "tests/verl_ext"], False),
    (["bash", "-c", "pgrep -f 'precision_rl run'"], False),
    ([], False),
])
def test_a_launcher_and_ray_s_daemons_are_verl_runs_and_nothing_else_is(cmdline, is_run):
    assert neighbours.is_verl_run(cmdline) is is_run


def _stand_in(*extra: str) -> subprocess.Popen:
    """Start a process whose command line reads as a launcher's (``python -c <sleep> precision_rl run ...``)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "precision_rl", "run", *extra])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.pid not in neighbours.find_neighbours(neighbours.own_pids()):
        time.sleep(0.05)
    return proc


def test_launchers_are_listed_before_ray_s_daemons():
    proc = _stand_in("sanity/grpo")
    try:
        found = list(neighbours.find_neighbours(neighbours.own_pids()).values())
        launchers = [": Ray " not in line for line in found]
        assert launchers == sorted(launchers, reverse=True)
    finally:
        proc.kill()
        proc.wait()


def test_another_launcher_is_found_unless_it_is_this_run_s_own_or_names_its_ray_folder():
    proc = _stand_in("sanity/grpo", "--ray-folder", "/tmp/ray-of-this-run")
    try:
        found = neighbours.find_neighbours(neighbours.own_pids())
        assert found[proc.pid].startswith(f"pid {proc.pid}: precision_rl run sanity/grpo")
        assert proc.pid not in neighbours.find_neighbours(neighbours.own_pids() | {proc.pid})
        assert proc.pid not in neighbours.find_neighbours(neighbours.own_pids(), "/tmp/ray-of-this-run")
    finally:
        proc.kill()
        proc.wait()


def test_the_line_names_three_neighbours_counts_the_rest_and_says_the_memory_of_its_moment():
    names = [f"pid {i}: Ray raylet" for i in range(5)]
    during = neighbours.shared_line(names, 1.234)
    assert during.startswith("5 other verl process(es) shared this machine (pid 0: Ray raylet; pid 1")
    assert "pid 3" not in during and "; and 2 more)" in during and "the least memory available was 1.2 GiB" in during
    at_start = neighbours.shared_line(names[:1], 9.87, now=True)
    assert at_start.startswith("1 other verl process(es) are running on this machine (pid 0: Ray raylet); 9.9 GiB")
    assert "run one at a time" in at_start and "GiB" not in neighbours.shared_line(names, None)


def test_a_run_beside_another_warns_at_its_start_records_its_neighbour_and_says_so_when_it_fails(tmp_path, capsys):
    plan = _fake_verl(_paper_plan(tmp_path), "import sys, time; time.sleep(3); print('ValueError: out of memory'); "
                                             "sys.exit(3)")
    neighbour = _stand_in("ladder/grpo", "--precision", "fp16")
    try:
        assert launch.execute(plan) == 3
    finally:
        neighbour.kill()
        neighbour.wait()
    lines = capsys.readouterr().err.strip().splitlines()
    named = f"pid {neighbour.pid}: precision_rl run ladder/grpo --precision fp16"
    warning = next(line for line in lines if line.startswith(f"warning: {plan.name}: "))
    assert "are running on this machine" in warning and "GiB of memory available" in warning
    assert named in warning or "more)" in warning, "launchers come first; three are named (others may run here)"
    assert lines[-1].startswith(f"error: {plan.name} failed") and "shared this machine" in lines[-2]
    attempt = runs.read_manifest(plan.run_dir)["attempts"][0]
    assert any(entry.startswith(named) for entry in attempt["shared_with"])
    assert 0 < attempt["lowest_available_gib"] < 1e4
