"""The README's profile-times block: each tiny profile's time per CPU kind, read from the committed runs."""

import json

from precision_rl import paths
from precision_rl.analysis import profile_times
from precision_rl.analysis.synthetic import write_run
from precision_rl.config.registry import load_experiment
from precision_rl.metrics import STEP_TIME

ZEN4 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cpu_count": 2,
        "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}
ZEN3 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 1 stepping 1", "cpu_count": 2,
        "matrix_flags": ["avx2"]}
SPEC = json.loads(json.dumps(load_experiment("sanity/grpo", "tiny").raw, default=str))


def _quick_run(root, seed, hardware, step_s, stamp="20260101T000000Z", **manifest):
    """A committed run of the instrument as registered now that logged the quick profile's 25 steps of ``step_s``
    seconds after 300 s of start-up."""
    wall = 300 + 25 * step_s
    ended = f"20260101T{int(wall) // 3600:02d}{int(wall) % 3600 // 60:02d}{int(wall) % 60:02d}Z"
    records = [{"step": s, "data": {STEP_TIME: step_s}} for s in range(1, 26)]
    return write_run(root, "tiny", "sanity/grpo", "fp16", seed, [records], stamp=stamp, manifest={
        "hardware": hardware, "spec": SPEC, "attempts": [{"attempt": 0, "metrics": "metrics.jsonl",
                                                          "started": "20260101T000000Z", "ended": ended,
                                                          "status": "finished"}], **manifest})


def test_the_readme_block_is_what_the_committed_runs_give_now():
    text = (paths.REPO_ROOT / "README.md").read_text()
    body = profile_times.section((paths.LOGS_DIR, paths.REFERENCE_DIR, paths.CALIBRATION_DIR))
    assert profile_times.README_BLOCK.render(body) in text, \
        "README.md's profile-times block is stale: run `make published-results`"


def test_each_arm_and_cpu_kind_that_a_run_timed_gets_both_profiles_or_a_dash_where_no_run_logged_their_steps(tmp_path):
    for seed in (42, 1):
        _quick_run(tmp_path, seed, ZEN4, 60.0)
    rows = profile_times.profile_rows((tmp_path,))
    assert len(rows) == 1  # fp16 with runs; bf16, which no run timed, is left out
    assert rows[0][0] == "FP16" and "family 25 model 17" in rows[0][1]
    assert rows[0][2:] == ["30 min (2 run(s))", "-"]  # 5 min of start-up and 25 steps of 60 s; none ran 300 steps


def test_calibration_runs_time_the_kinds_no_published_run_ran_on_and_never_outvote_the_published_ones(tmp_path):
    logs, calibration = tmp_path / "logs", tmp_path / "calibration"
    published = _quick_run(logs, 42, ZEN4, 60.0)
    _quick_run(calibration, 42, ZEN4, 60.0)  # the published run's copy among the calibration runs: counted once
    _quick_run(calibration, 1, ZEN4, 120.0, stamp="20260102T000000Z")  # a calibration run of a published kind
    _quick_run(calibration, 42, ZEN3, 90.0, stamp="20260104T000000Z")  # the one run of another kind
    _quick_run(calibration, 7, ZEN3, 1.0, stamp="20260103T000000Z",
               extra_overrides=["actor_rollout_ref.actor.optim.lr=1e-3"])  # another configuration
    assert (calibration / published.relative_to(logs)).is_dir()
    rows = {row[1]: row[2] for row in profile_times.profile_rows((logs, calibration))}
    assert len(rows) == 2
    assert rows[next(k for k in rows if "model 17" in k)] == "30 min (1 run(s))"
    assert rows[next(k for k in rows if "model 1)" in k)] == "42 min (1 run(s))"  # 300 s + 25 x 90 s
