"""The grid: what it does with each run follows the newest run directory of the same configuration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from precision_rl import cli, paths
from precision_rl.config.registry import load_experiment
from precision_rl.config.scale import ScaleDecision
from precision_rl.launch import grid, runs
from precision_rl.launch.runner import RunOptions

TINY = ScaleDecision("tiny", "tiny", "test")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(paths.LOGS_ENV, str(tmp_path / "logs"))
    return tmp_path


def _record(spec, arm: str, seed: int, status: str, *, extra=(), launcher=None, now=0, root=None,
            last_step: int = 300) -> None:
    """Write a run directory as the launcher leaves it: a manifest with the registered spec and one attempt, whose
    metrics file ends at ``last_step`` (default: the whole calibrated run)."""
    root = root or paths.runs_root()
    run_dir = runs.create_run_dir(runs.planned_run_dir(root, "tiny", spec.name, arm, seed, now=now))
    attempt = {"attempt": 0, "status": status, "launcher": launcher or runs.launcher_record()}
    runs.write_manifest(run_dir, {"spec": json.loads(json.dumps(spec.raw, default=str)), "extra_overrides": list(extra),
                                  "status": status, "attempts": [attempt]})
    runs.metrics_path(run_dir, 0).write_text(json.dumps({"step": last_step, "data": {}}) + "\n")


def _actions(spec, seeds=None, extra=(), profile="quick"):
    return {(g.arm.label, g.seed): g.action
            for g in grid.plan_grid([(spec, a) for a in spec.arms], "tiny", seeds, extra, profile)}


def test_seeds_come_from_the_registry_unless_given():
    sanity, one_seed = load_experiment("sanity/grpo", "tiny"), load_experiment("sanity/grpo_fork_grader", "tiny")
    assert sanity.seeds == (42, 1, 7) and one_seed.seeds == (42,) and load_experiment("sanity/grpo").seeds == (42,)
    assert set(_actions(sanity)) == {(a, s) for a in ("fp16", "bf16") for s in (42, 1, 7)}
    assert set(_actions(one_seed, seeds=(3,))) == {("fp16", 3), ("bf16", 3)}


def test_each_run_state_gives_its_action():
    spec = load_experiment("sanity/grpo", "tiny")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = {**runs.launcher_record(), "pid": gone.pid}
    gone.wait()
    _record(spec, "fp16", 42, "finished")
    _record(spec, "fp16", 1, "killed")
    _record(spec, "fp16", 7, "running")  # its launcher (this process) is alive
    _record(spec, "bf16", 42, "running", launcher=dead)  # died
    _record(spec, "bf16", 1, "finished", extra=("trainer.total_training_steps=3",))  # another configuration
    assert _actions(spec) == {("fp16", 42): grid.SKIP, ("fp16", 1): grid.RESUME, ("fp16", 7): grid.BUSY,
                              ("bf16", 42): grid.RESUME, ("bf16", 1): grid.START, ("bf16", 7): grid.START}
    assert _actions(spec, seeds=(1,), extra=("trainer.total_training_steps=3",))[("bf16", 1)] == grid.SKIP


def test_a_published_run_is_skipped_even_without_its_run_directory():
    spec = load_experiment("sanity/grpo", "tiny")
    _record(spec, "fp16", 42, "finished", root=paths.logs_root())
    _record(spec, "bf16", 42, "finished", root=paths.logs_root(), extra=("trainer.total_training_steps=3",))
    _record(spec, "fp16", 1, "killed")
    _record(spec, "fp16", 1, "finished", root=paths.logs_root())
    actions = _actions(spec)
    assert actions[("fp16", 42)] == actions[("fp16", 1)] == grid.PUBLISHED
    assert actions[("bf16", 42)] == grid.START
    assert "2 skip (published)" in grid.describe(grid.plan_grid([(spec, a) for a in spec.arms], "tiny"))


def test_a_finished_quick_run_covers_the_quick_grid_and_is_resumed_by_a_calibrated_one():
    spec = load_experiment("sanity/grpo", "tiny")
    _record(spec, "fp16", 42, "finished", last_step=spec.quick_steps)
    _record(spec, "bf16", 42, "finished", root=paths.logs_root())  # a published calibrated run covers both
    assert _actions(spec, seeds=(42,)) == {("fp16", 42): grid.SKIP, ("bf16", 42): grid.PUBLISHED}
    assert _actions(spec, seeds=(42,), profile="calibrated") == {("fp16", 42): grid.RESUME,
                                                                 ("bf16", 42): grid.PUBLISHED}


def test_a_run_of_an_older_registry_entry_does_not_count():
    spec = load_experiment("sanity/grpo", "tiny")
    older = load_experiment("sanity/grpo_token_tis", "tiny")  # stands in for the same file before an edit
    run_dir = runs.create_run_dir(runs.planned_run_dir(paths.runs_root(), "tiny", spec.name, "fp16", 42, now=0))
    runs.write_manifest(run_dir, {"spec": json.loads(json.dumps(older.raw, default=str)), "extra_overrides": [],
                                  "status": "finished", "attempts": []})
    assert _actions(spec, seeds=(42,))[("fp16", 42)] == grid.START


def test_run_grid_goes_on_after_a_failure_and_resumes_unfinished_runs(monkeypatch, capsys):
    spec = load_experiment("sanity/grpo", "tiny")
    _record(spec, "fp16", 42, "interrupted")
    _record(spec, "bf16", 42, "finished")
    calls = []

    def fake_plan(spec, arm, decision, options):
        return (spec.name, arm.label, options.seed, options.resume)

    def fake_execute(plan):
        calls.append(plan)
        return 1 if plan[1] == "fp16" and plan[2] == 1 else 0

    monkeypatch.setattr(grid, "plan_run", fake_plan)
    monkeypatch.setattr(grid, "execute", fake_execute)
    plan = grid.plan_grid([(spec, a) for a in spec.arms], "tiny", (42, 1))
    assert grid.run_grid(plan, TINY, RunOptions()) == 1
    assert calls == [("sanity/grpo", "fp16", 42, True), ("sanity/grpo", "fp16", 1, False),
                     ("sanity/grpo", "bf16", 1, False)]
    err = capsys.readouterr().err
    assert "2 of 3 pending runs finished, 1 skipped; failed: sanity.grpo-fp16-s1" in err


def test_grid_dry_run_prints_the_plan_and_bad_seeds_are_one_line(capsys):
    assert cli.main(["grid", "sanity/grpo", "--scale", "tiny", "--dry-run", "--precision", "fp16"]) == 0
    err = capsys.readouterr().err
    assert "sanity.grpo-fp16-s7" in err and "3 runs: 3 to start" in err
    assert not (paths.runs_root()).exists()
    assert cli.main(["grid", "--seeds", "1,x", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: SEEDS must be non-negative integers")


def test_the_grid_eta_times_a_new_configuration_by_committed_runs_of_its_batch_shape():
    from precision_rl.analysis.synthetic import write_run
    from precision_rl.metrics import STEP_TIME

    sanity = load_experiment("sanity/grpo", "tiny")
    records = [{"step": step, "data": {STEP_TIME: 50.0}} for step in range(1, 26)]
    write_run(paths.logs_root(), "tiny", "sanity/grpo", "fp16", 42, [records], manifest={
        "hardware": runs.hardware(), "spec": json.loads(json.dumps(sanity.raw, default=str)),
        "attempts": [{"attempt": 0, "metrics": "metrics.jsonl", "started": "20260101T000000Z",
                      "ended": "20260101T002450Z", "status": "finished"}]})  # 240 s of start-up, 25 steps of 50 s
    noisy, ladder = load_experiment("ladder/synthetic_s1", "tiny"), load_experiment("ladder/grpo", "tiny")
    planned = grid.plan_grid([(noisy, arm) for arm in noisy.arms] + [(ladder, ladder.arms[0])], "tiny", (42,))
    line = grid.grid_eta(planned, "quick")
    assert line.startswith("ETA of the 2 pending run(s): 25 min, 1 of them timed by committed runs of other "
                           "configurations with their model, batch and lengths")
    assert line.endswith(f"without 1 that no committed run of their configuration or batch shape times "
                         f"({runs.run_name('ladder/grpo', ladder.arms[0].label, 42)})")
