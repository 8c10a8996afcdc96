"""The ETA a run prints at its start: read from the committed runs of its configuration and arm on the nearest CPU
kind, start-up included, and nothing where none logged the steps."""

import math

from precision_rl.analysis.synthetic import write_run
from precision_rl.launch import eta, runs
from precision_rl.metrics import STEP_TIME

EPYC_ZEN4 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cpu_count": 2,
             "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}
EPYC_ZEN3 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 1 stepping 1", "cpu_count": 2,
             "matrix_flags": ["avx2"]}
XEON = {"cpu_model": "Intel Xeon", "cpu_id": "GenuineIntel family 6 model 143 stepping 8", "cpu_count": 2,
        "matrix_flags": ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512_fp16", "avx512f"]}


def _committed(root, seed, hardware, step_s, precision="fp16", steps=10, wall_s=None, config="cfg", shared_with=()):
    """One committed run: ``steps`` steps of ``step_s`` seconds; its first attempt lasted ``wall_s`` (default: the
    steps plus 240 s of start-up) beside the processes ``shared_with``."""
    wall_s = steps * step_s + 240 if wall_s is None else wall_s
    end = f"20260101T00{int(wall_s) // 60:02d}{int(wall_s) % 60:02d}Z"
    records = [{"step": s, "data": {STEP_TIME: step_s}} for s in range(1, steps + 1)]
    return write_run(root, "tiny", "sanity/grpo", precision, seed, [records], manifest={
        "hardware": hardware, runs.CONFIGURATION_FIELD: config,
        "attempts": [{"attempt": 0, "metrics": "metrics.jsonl", "started": "20260101T000000Z", "ended": end,
                      "status": "finished", **({"shared_with": list(shared_with)} if shared_with else {})}]})


def test_the_estimate_is_the_median_over_the_nearest_cpu_kind_with_its_start_up(tmp_path):
    root = tmp_path / "logs"
    for seed, step_s in ((42, 40.0), (1, 50.0), (7, 60.0)):
        _committed(root, seed, EPYC_ZEN4, step_s)
    _committed(root, 9, XEON, 10.0)
    _committed(root, 5, EPYC_ZEN4, 1.0, precision="bf16")  # another arm
    _committed(root, 6, EPYC_ZEN4, 1.0, config="other")  # another configuration
    fp16 = {"label": "fp16", "train": "fp16", "infer": "fp16"}
    same = eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", fp16), 1, 10, (root,))
    assert math.isclose(same.seconds, 240 + 10 * 50) and len(same.runs) == 3 and same.same_kind
    assert "family 25 model 17" in same.cpu and "this CPU kind" in same.describe()
    nearest = eta.estimate(EPYC_ZEN3, eta.same_run_kind("cfg", fp16), 1, 10, (root,))  # same vendor beats another vendor
    assert math.isclose(nearest.seconds, 740) and not nearest.same_kind and "another CPU kind" in nearest.describe()
    assert math.isclose(eta.estimate(XEON, eta.same_run_kind("cfg", fp16), 1, 10, (root,)).seconds, 340)
    assert math.isclose(eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", fp16), 6, 10, (root,)).seconds, 240 + 5 * 50)
    assert eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", fp16), 1, 11, (root,)) is None  # no committed run logged step 11
    assert eta.estimate(EPYC_ZEN4, eta.same_run_kind("absent", fp16), 1, 10, (root,)) is None
    assert eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", fp16), 1, 10, (tmp_path / "nowhere",)) is None


def test_published_runs_outrank_calibration_runs_of_their_kind_which_time_the_kinds_without_one(tmp_path):
    logs, calibration = tmp_path / "logs", tmp_path / "calibration"
    fp16 = eta.same_run_kind("cfg", {"train": "fp16", "infer": "fp16"})
    _committed(logs, 42, EPYC_ZEN4, 50.0)
    _committed(calibration, 42, EPYC_ZEN4, 50.0)  # the published run's copy, at the same place: counted once
    _committed(calibration, 1, EPYC_ZEN4, 500.0)  # a calibration run of a kind a published run timed: not counted
    _committed(calibration, 7, EPYC_ZEN3, 80.0)
    zen4 = eta.estimate(EPYC_ZEN4, fp16, 1, 10, (logs, calibration))
    assert math.isclose(zen4.seconds, 240 + 10 * 50) and len(zen4.runs) == 1 and "logs" in zen4.runs[0]
    zen3 = eta.estimate(EPYC_ZEN3, fp16, 1, 10, (logs, calibration))
    assert math.isclose(zen3.seconds, 240 + 10 * 80) and zen3.same_kind and "family 25 model 1)" in zen3.cpu


def test_runs_of_another_kind_are_scaled_by_what_a_configuration_committed_on_both_kinds_measured(tmp_path):
    fp16 = eta.same_run_kind("cfg", {"train": "fp16", "infer": "fp16"})
    _committed(tmp_path, 42, EPYC_ZEN4, 50.0)
    assert eta.kind_ratio(EPYC_ZEN3, EPYC_ZEN4, (tmp_path,)) is None  # nothing ran on both kinds: unscaled
    assert math.isclose(eta.estimate(EPYC_ZEN3, fp16, 1, 10, (tmp_path,)).seconds, 740)
    _committed(tmp_path, 1, EPYC_ZEN4, 40.0, config="both", steps=4)
    _committed(tmp_path, 2, EPYC_ZEN3, 60.0, config="both", steps=3)  # steps 1-3 in common: 60 s against 40 s
    _committed(tmp_path, 3, XEON, 5.0, config="both")  # a third kind counts on neither side
    ratio = eta.kind_ratio(EPYC_ZEN3, EPYC_ZEN4, (tmp_path,))
    assert math.isclose(ratio.ratio, 1.5) and ratio.configurations == 1
    scaled = eta.estimate(EPYC_ZEN3, fp16, 1, 10, (tmp_path,))
    assert math.isclose(scaled.seconds, 1.5 * (240 + 10 * 50)) and "scaled by 1.50" in scaled.describe()
    same = eta.estimate(EPYC_ZEN4, fp16, 1, 10, (tmp_path,))  # a run of this kind is never scaled
    assert math.isclose(same.seconds, 740) and "scaled" not in same.describe()
    _committed(tmp_path, 4, EPYC_ZEN4, 80.0, config="both", steps=3, shared_with=["pytest"])
    assert math.isclose(eta.kind_ratio(EPYC_ZEN3, EPYC_ZEN4, (tmp_path,)).ratio, 1.5)  # a side's run that ran alone wins
    _committed(tmp_path, 5, EPYC_ZEN3, 120.0, config="shared", steps=3, shared_with=["pytest"])
    _committed(tmp_path, 6, EPYC_ZEN4, 60.0, config="shared", steps=3, shared_with=["pytest"])
    assert math.isclose(eta.kind_ratio(EPYC_ZEN3, EPYC_ZEN4, (tmp_path,)).ratio, 1.75)  # no side ran alone: all count


def test_durations_read_as_minutes_then_hours_and_bad_lines_are_skipped(tmp_path):
    assert eta.format_duration(47 * 60) == "47 min" and eta.format_duration(4.1 * 3600) == "4.1 h"
    run_dir = _committed(tmp_path, 42, EPYC_ZEN4, 30.0, steps=2)
    (run_dir / "metrics.jsonl").write_text((run_dir / "metrics.jsonl").read_text() + '{"step": 3, "data": {"tim\n')
    assert eta.step_times(run_dir)[0] == {1: 30.0, 2: 30.0}


def test_an_unreadable_committed_manifest_is_passed_over(tmp_path):
    _committed(tmp_path, 42, EPYC_ZEN4, 50.0)
    broken = _committed(tmp_path, 1, EPYC_ZEN4, 10.0)
    (broken / runs.MANIFEST).write_text("{not json")
    found = eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", {"train": "fp16", "infer": "fp16"}), 1, 10, (tmp_path,))
    assert math.isclose(found.seconds, 240 + 10 * 50) and len(found.runs) == 1


def test_a_new_configuration_is_timed_by_committed_runs_of_its_batch_shape(tmp_path):
    shape = {"model": "tiny", "backend": "fsdp", "hyper": {"train_batch_size": 64, "rollout_n": 16,
                                                          "max_response_length": 64, "lr": 1e-4}}
    committed = _committed(tmp_path, 42, EPYC_ZEN4, 50.0)
    doc = runs.read_manifest(committed)
    runs.write_manifest(committed, {**doc, "spec": shape})
    fp16 = {"label": "fp16", "train": "fp16", "infer": "fp16"}
    new = {"scale": "tiny", "precision": fp16, "spec": {**shape, "hyper": {**shape["hyper"], "lr": 3e-4,
                                                                           "rollout_logit_noise": 3.0}}}
    assert eta.estimate(EPYC_ZEN4, eta.same_run_kind("new-config", fp16), 1, 10, (tmp_path,)) is None
    alike = eta.estimate(EPYC_ZEN4, eta.same_cost_shape(new), 1, 10, (tmp_path,))
    assert alike is not None and math.isclose(alike.seconds, 240 + 10 * 50)
    longer = {**new, "spec": {**shape, "hyper": {**shape["hyper"], "max_response_length": 128}}}
    assert eta.estimate(EPYC_ZEN4, eta.same_cost_shape(longer), 1, 10, (tmp_path,)) is None
    bf16 = {**new, "precision": {"label": "bf16", "train": "bf16", "infer": "bf16"}}
    assert eta.estimate(EPYC_ZEN4, eta.same_cost_shape(bf16), 1, 10, (tmp_path,)) is None


def test_runs_that_had_the_machine_to_themselves_time_it_where_there_are_any(tmp_path):
    root = tmp_path / "logs"
    fp16 = {"label": "fp16", "train": "fp16", "infer": "fp16"}
    for seed, step_s in ((42, 40.0), (1, 90.0)):
        run_dir = _committed(root, seed, EPYC_ZEN4, step_s)
        if seed == 1:
            doc = runs.read_manifest(run_dir)
            doc["attempts"][0]["shared_with"] = ["pid 12: precision_rl run sanity/grpo"]
            runs.write_manifest(run_dir, doc)
    alone = eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", fp16), 1, 10, (root,))
    assert math.isclose(alone.seconds, 240 + 10 * 40) and len(alone.runs) == 1 and "shared" not in alone.describe()
    _committed(root, 7, EPYC_ZEN3, 10.0)  # an unshared run of another CPU kind: the kind still comes first
    for run_dir in (p.parent for p in root.rglob(runs.MANIFEST)):
        doc = runs.read_manifest(run_dir)
        if doc["hardware"] == EPYC_ZEN4:
            doc["attempts"][0]["shared_with"] = ["pid 12: Ray raylet"]
            runs.write_manifest(run_dir, doc)
    beside = eta.estimate(EPYC_ZEN4, eta.same_run_kind("cfg", fp16), 1, 10, (root,))
    assert math.isclose(beside.seconds, 240 + 10 * 65) and beside.same_kind and beside.shared
    assert beside.describe().endswith("; they shared the machine with other runs)")
