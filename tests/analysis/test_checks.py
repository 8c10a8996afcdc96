"""The pass criteria: checks pass and fail where they must, and the command names the failed rule."""

import math
import shutil
import warnings

import pytest

from precision_rl import metrics as M
from precision_rl.analysis import checks, logs, publish
from precision_rl.analysis.synthetic import write_run
from precision_rl.cli import main
from precision_rl.config.algorithms import AlgorithmSettings, verl_algorithm_overrides
from precision_rl.errors import UserError
from precision_rl.launch import runs

STEPS = 20


def records(reward, diff, kl, extreme=None, prefix=""):
    """Constant-mismatch records whose reward follows ``reward(step)``."""
    out = []
    for s in range(1, STEPS + 1):
        data = {M.REWARD: reward(s), prefix + M.TOKEN_KL_K3: kl}
        if diff is not None:
            data[M.PROBS_DIFF_ABS_MEAN] = diff
        if extreme is not None:
            data[M.PROBS_DIFF_MAX], data[M.PROBS_DIFF_MIN] = extreme, -extreme / 2
        out.append({"step": s, "data": data})
    return out


def rising(s):
    return min(0.97, 0.5 + 0.05 * s)


def collapsing(s):
    return 0.7 if s < 12 else 0.02


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "runs"
    # Paper-like levels: FP16 mean|π−μ| 7e-4, KL 1e-5; BF16 4e-3, 1e-3 (and a collapse).
    write_run(root, "tiny", "sanity/grpo", "fp16", 1, [records(rising, 7e-4, 1e-5, extreme=0.05)])
    write_run(root, "tiny", "sanity/grpo", "bf16", 1, [records(collapsing, 4e-3, 1e-3)])
    # An "fp16" run with a BF16-level mismatch (e.g. the rollout silently in bf16) and large extremes.
    write_run(root, "tiny", "sanity/gspo", "fp16", 1, [records(rising, 4e-3, 1e-3, extreme=0.5)], algorithm="gspo")
    write_run(root, "tiny", "sanity/gspo", "bf16", 1, [records(rising, 4e-3, 1e-3)], algorithm="gspo")
    # Bypass mode: KL under actor/, no probs_diff; not a sanity experiment (no reward rule).
    write_run(root, "paper", "moe/pg_seq_tis", "fp16", 1, [records(rising, None, 1e-5, prefix=M.ACTOR_PREFIX)],
              algorithm="pg_seq_tis")
    return root


def by_rule(results, run):
    return {r.rule: r for r in results if r.run == run}


def test_checks_pass_and_fail_where_they_must(root):
    results = checks.run_checks(logs.load_runs([root], progress=False))
    good = by_rule(results, "sanity.grpo-fp16-s1")
    assert {k: v.status for k, v in good.items()} == {
        "sanity_reward": "pass", "mismatch_logged": "pass",
        "mismatch_start/mean_abs_diff": "pass", "mismatch_throughout/mean_abs_diff": "pass",
        "mismatch_start/token_kl": "pass", "mismatch_throughout/token_kl": "pass", "mismatch_extreme": "pass",
        "fp16_vs_bf16/mean_abs_diff": "pass", "fp16_vs_bf16/token_kl": "pass",
    }
    assert good["sanity_reward"].value == pytest.approx(0.97)
    assert good["fp16_vs_bf16/token_kl"].value == pytest.approx(100.0)

    collapsed = by_rule(results, "sanity.grpo-bf16-s1")
    assert collapsed["sanity_reward"].status == "fail" and collapsed["sanity_reward"].value == pytest.approx(0.02)
    # Steps 1-11 at 0.7, 12-20 at 0.02: the plateau note covers all 20 logged steps (fewer than PLATEAU_STEPS).
    assert "per-step mean 0.394 (sd 0.347) over steps 1-20" in collapsed["sanity_reward"].note
    assert collapsed["mismatch_start/token_kl"].status == "pass"  # 1e-3 is the paper's BF16 level
    assert "mismatch_throughout/token_kl" not in collapsed  # BF16 mismatch may grow

    leaky = by_rule(results, "sanity.gspo-fp16-s1")
    for rule in ("mismatch_start/mean_abs_diff", "mismatch_throughout/token_kl", "mismatch_extreme",
                 "fp16_vs_bf16/mean_abs_diff", "fp16_vs_bf16/token_kl"):
        assert leaky[rule].status == "fail", rule
    assert leaky["sanity_reward"].status == "pass"

    bypass = by_rule(results, "moe.pg_seq_tis-fp16-s1")
    assert "sanity_reward" not in bypass
    assert bypass["mismatch_start/token_kl"].status == "pass"
    assert bypass["mismatch_start/mean_abs_diff"].status == "skip"
    assert bypass["mismatch_extreme"].status == "skip"


def test_bounds_come_from_the_coarser_dtype():
    assert checks.bounds_for("bf16", "fp32") == checks.BOUNDS["bf16"]
    assert checks.bounds_for("fp32", "fp16") == checks.BOUNDS["fp16"]
    assert checks.BOUNDS["fp16"].token_kl < 1e-3 and checks.BOUNDS["fp16"].mean_abs_diff < 0.004


def test_a_run_without_mismatch_metrics_fails(tmp_path):
    write_run(tmp_path, "tiny", "sanity/grpo", "fp32", 1, [[{"step": 1, "data": {M.REWARD: 0.99}}]])
    results = by_rule(checks.run_checks(logs.load_runs([tmp_path], progress=False)), "sanity.grpo-fp32-s1")
    assert results["mismatch_logged"].status == "fail" and results["sanity_reward"].status == "pass"


def test_selection(root):
    table = logs.load_runs([root], progress=False)
    assert {r.run for r in checks.run_checks(table, ["sanity/grpo"])} == {
        "sanity.grpo-fp16-s1", "sanity.grpo-bf16-s1", "sanity/grpo fp16", "sanity/grpo bf16"}
    assert {r.run for r in checks.run_checks(table, ["*-fp16-*"], "paper")} == {"moe.pg_seq_tis-fp16-s1"}
    run_dir = next((root / "tiny" / "sanity" / "gspo" / "bf16").iterdir())
    assert {r.run for r in checks.run_checks(table, [str(run_dir)])} == {"sanity.gspo-bf16-s1", "sanity/gspo bf16"}
    with pytest.raises(UserError, match="no run matches 'nope'"):
        checks.run_checks(table, ["nope"])
    with pytest.raises(UserError, match="no runs to check"):
        checks.run_checks(logs.build_table([]))


def test_command_exit_codes_and_named_rules(root, capsys):
    assert main(["check", "sanity.grpo-fp16-s1", "--runs", str(root)]) == 0
    assert main(["check", "sanity/grpo", "--runs", str(root)]) == 1
    err = capsys.readouterr().err
    assert "FAILED sanity_reward: sanity.grpo-bf16-s1" in err
    assert "FAILED sanity_reward_over_seeds: sanity/grpo bf16" in err
    assert "2 failed" in err


def _seeded(root, arm, finals, instrument=None, extra=None, stamp="20260101T000000Z"):
    """Write one sanity/grpo run per seed whose reward ends at ``finals[seed]`` (constant over 10 steps)."""
    manifest = {**({"tiny_instrument": instrument} if instrument else {}),
                **({"extra_overrides": extra} if extra else {})}
    for seed, final in finals.items():
        write_run(root, "tiny", "sanity/grpo", arm, seed, [[{"step": s, "data": {M.REWARD: final}}
                                                             for s in range(1, 11)]],
                  manifest=manifest or None, stamp=stamp)


def _verdict(results, arm):
    return next(r for r in results if r.rule == "sanity_reward_over_seeds" and r.run == f"sanity/grpo {arm}")


def test_the_sanity_verdict_is_over_the_experiments_seeds(tmp_path):
    # sanity/grpo runs the seeds 42, 1 and 7 at tiny scale (experiments/_base/sanity.yaml).
    _seeded(tmp_path / "pass", "fp16", {42: 0.97, 1: 0.96, 7: 0.951})
    _seeded(tmp_path / "fail", "fp16", {42: 0.99, 1: 0.94, 7: 0.99})
    _seeded(tmp_path / "partial", "fp16", {42: 0.99})
    for case, status in (("pass", "pass"), ("fail", "fail"), ("partial", "skip")):
        verdict = _verdict(checks.run_checks(logs.load_runs([tmp_path / case], progress=False)), "fp16")
        assert verdict.status == status, (case, verdict)
    verdict = _verdict(checks.run_checks(logs.load_runs([tmp_path / "pass"], progress=False)), "fp16")
    assert verdict.value == pytest.approx(0.951) and "mean 0.960 [0.951-0.970] over 3 seed(s)" in verdict.note
    partial = _verdict(checks.run_checks(logs.load_runs([tmp_path / "partial"], progress=False)), "fp16")
    assert "other seed(s) [1, 7]" in partial.note


def test_a_run_is_placed_in_the_committed_band_of_its_configuration(tmp_path):
    instrument = {"model_weights_sha256": "a" * 64, "problem_list_sha256": "b" * 64}
    _seeded(tmp_path / "reference", "fp16", {42: 0.96, 1: 0.98, 7: 0.97}, instrument)
    _seeded(tmp_path / "other-instrument", "fp16", {42: 0.2}, {**instrument, "model_weights_sha256": "c" * 64})
    _seeded(tmp_path / "shorter", "fp16", {1: 0.1}, instrument, extra=["trainer.total_training_steps=10"])
    _seeded(tmp_path / "mine", "fp16", {42: 0.955}, instrument, stamp="20260202T000000Z")
    reference = logs.load_runs([tmp_path / "reference", tmp_path / "other-instrument", tmp_path / "shorter"],
                               progress=False)
    results = checks.run_checks(logs.load_runs([tmp_path / "mine"], progress=False), reference=reference)
    note = by_rule(results, "sanity.grpo-fp16-s42")["sanity_reward"].note
    assert "below the committed band 0.960-0.980 (seeds 1: 0.980, 7: 0.970, 42: 0.960; runs " in note
    assert note.count(str(tmp_path / "reference")) == 3 and "other-instrument" not in note and "shorter" not in note
    alone = checks.run_checks(logs.load_runs([tmp_path / "other-instrument"], progress=False), reference=reference)
    assert "no committed run of this configuration" in by_rule(alone, "sanity.grpo-fp16-s42")["sanity_reward"].note


def test_a_run_name_in_both_committed_roots_keeps_the_band_of_each_configuration(tmp_path, monkeypatch, capsys):
    # results/logs holds the full-length run of seed 42 and results/reference the 2-step gate's run of the same name:
    # each is the band of its own configuration, and neither is dropped as a duplicate of the other.
    monkeypatch.setenv("PRECISION_RL_LOGS", str(tmp_path / "logs"))
    monkeypatch.setenv("PRECISION_RL_REFERENCE", str(tmp_path / "reference"))
    short = ["trainer.total_training_steps=2"]
    _seeded(tmp_path / "logs", "fp16", {42: 0.97})
    _seeded(tmp_path / "reference", "fp16", {42: 0.40}, extra=short, stamp="20260303T000000Z")
    _seeded(tmp_path / "full", "fp16", {1: 0.96}, stamp="20260404T000000Z")
    _seeded(tmp_path / "two-step", "fp16", {1: 0.45}, extra=short, stamp="20260404T000000Z")
    notes = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", logs.LogWarning)
        for name in ("full", "two-step"):
            main(["check", "sanity.grpo-fp16-s1", "--runs", str(tmp_path / name)])
            notes[name] = capsys.readouterr().out
    assert "below the committed band 0.970-0.970 (seeds 42: 0.970" in notes["full"]
    assert "above the committed band 0.400-0.400 (seeds 42: 0.400" in notes["two-step"]


def test_pairs_and_verdicts_use_only_runs_of_one_configuration_and_name_them(tmp_path):
    # A full-length local FP16 run beside a 10-step BF16 run with other settings: no pair, and the verdict over
    # seeds of the FP16 configuration does not count the other run.
    _seeded(tmp_path / "runs", "fp16", {42: 0.97})
    _seeded(tmp_path / "runs", "bf16", {42: 0.3}, extra=["trainer.total_training_steps=10"])
    _seeded(tmp_path / "runs", "fp16", {1: 0.2}, extra=["trainer.total_training_steps=10"])
    table = logs.load_runs([tmp_path / "runs"], progress=False)
    configs = dict(zip(table.runs["run"], table.runs["config"], strict=True))
    assert configs["sanity.grpo-fp16-s42"] != configs["sanity.grpo-fp16-s1"] == configs["sanity.grpo-bf16-s42"]
    results = checks.run_checks(table, ["sanity.grpo-fp16-s42"])
    rules = by_rule(results, "sanity.grpo-fp16-s42")
    assert rules["fp16_vs_bf16"].status == "skip"
    assert configs["sanity.grpo-fp16-s42"] in rules["fp16_vs_bf16"].note
    verdict = _verdict(results, "fp16")
    assert "over 1 seed(s) (42: 0.970)" in verdict.note and configs["sanity.grpo-fp16-s42"] in verdict.note
    assert "s42-" in verdict.note and "s1-" not in verdict.note
    shorter = checks.run_checks(table, ["sanity.grpo-fp16-s1"])
    assert "over 1 seed(s) (1: 0.200)" in _verdict(shorter, "fp16").note
    paired = by_rule(shorter, "sanity.grpo-fp16-s1")  # paired with the BF16 run of its configuration
    assert "fp16_vs_bf16" not in paired and "fp16_vs_bf16/token_kl" in paired


def _gate_run(root, seed, rewards, kl, stamp="20260101T000000Z", hardware=None, median=None):
    """Write one FP16 sanity/grpo run logging ``rewards`` (one per step), a constant token KL ``kl`` and, where given,
    a constant median |log ratio| ``median``."""
    records = [{"step": s, "data": {M.REWARD: r, M.TOKEN_KL_K3: kl, M.STEP_TIME: 10.0 + s,
                                    **({M.ABS_LOG_RATIO_MEDIAN: median} if median is not None else {})}}
               for s, r in enumerate(rewards, start=1)]
    write_run(root, "tiny", "sanity/grpo", "fp16", seed, [records], stamp=stamp,
              manifest={"hardware": hardware or {"matrix_flags": ["avx2"], "cpu_count": 2}})


def test_the_regression_gate_places_a_run_in_the_committed_band_and_wants_a_repeat_exact(tmp_path):
    committed = tmp_path / "committed"
    curve = [0.9, 0.95, 0.96, 0.97, 0.96, 0.97]
    for seed, shift, kl in ((42, 0.0, 1e-5), (1, 0.01, 2e-5), (7, -0.01, 1.5e-5)):
        _gate_run(committed, seed, [r + shift for r in curve], kl)
    reference = logs.load_runs([committed], progress=False)

    def gate(name, rewards, kl, seed=42, hardware=None):
        _gate_run(tmp_path / name, seed, rewards, kl, stamp="20260202T000000Z", hardware=hardware)
        results = checks.run_checks(logs.load_runs([tmp_path / name], progress=False), reference=reference)
        return {r.rule: r for r in results if r.rule.startswith("regression/")}

    same = gate("same", curve, 1e-5)  # the same seed, numerics and values; only the step time differs
    assert {rule: r.status for rule, r in same.items()} == {
        "regression/reward": "pass", "regression/band": "pass", "regression/token_kl": "pass",
        "regression/repeat": "pass"}
    assert "committed/tiny/sanity/grpo/fp16/s42-" in same["regression/repeat"].note
    moved = gate("moved", [*curve[:-1], 0.9], 1e-5)
    assert moved["regression/repeat"].status == "fail" and M.REWARD in moved["regression/repeat"].note
    assert moved["regression/reward"].status == "pass"  # 0.948 is inside the band's margin
    elsewhere = gate("elsewhere", [*curve[:-1], 0.9], 1e-5, hardware={"matrix_flags": ["amx_fp16"], "cpu_count": 2})
    assert "regression/repeat" not in elsewhere  # other numerics: no exact repeat to expect
    low = gate("low", [0.5] * 6, 1e-5, seed=5)
    assert low["regression/reward"].status == "fail" and "regression/repeat" not in low
    assert "band 0.952-0.972 ± 0.10" in low["regression/reward"].note
    kl = gate("kl", curve, 1e-3, seed=5)
    assert kl["regression/token_kl"].status == "fail" and kl["regression/reward"].status == "pass"
    mine = tmp_path / "mine"  # a local run and its published copy: the copy is not its band
    _gate_run(mine, 9, [0.2] * 6, 1e-5, stamp="20260303T000000Z")
    copies = tmp_path / "with-copy"
    shutil.copytree(committed, copies)
    publish.publish_runs(logs.run_dirs_under(mine), copies)
    with_copy = logs.load_runs([copies], progress=False)
    own = {r.rule: r for r in checks.run_checks(logs.load_runs([mine], progress=False), reference=with_copy)}
    assert own["regression/reward"].status == "fail" and "s9-" not in own["regression/reward"].note
    unmatched = tmp_path / "unmatched"
    write_run(unmatched, "tiny", "sanity/grpo", "fp16", 42, [[{"step": 1, "data": {M.REWARD: 0.1}}]],
              manifest={"extra_overrides": ["trainer.total_training_steps=1"]})
    results = checks.run_checks(logs.load_runs([unmatched], progress=False), reference=reference)
    assert not [r for r in results if r.rule.startswith("regression/")]  # no committed run of its configuration


def test_the_gate_reads_a_short_run_s_mismatch_by_its_median_log_ratio_not_by_heavy_tailed_token_means(tmp_path):
    """A 2-step run on other numerics whose k3 is 16x the committed one's (one ill-conditioned token does that) passes
    on its median |log ratio|; a median 10x off fails. With HEAVY_TAIL_MIN_STEPS steps the token KL is gated again."""
    committed = tmp_path / "committed"
    _gate_run(committed, 42, [0.75, 0.9], 5.4e-5, median=1e-4)
    reference = logs.load_runs([committed], progress=False)
    other = {"matrix_flags": ["avx2", "avx512_bf16", "avx512f"], "cpu_count": 2}  # committed: avx2 only

    def gate(name, rewards, kl, median):
        _gate_run(tmp_path / name, 42, rewards, kl, stamp="20260202T000000Z", hardware=other, median=median)
        results = checks.run_checks(logs.load_runs([tmp_path / name], progress=False), reference=reference)
        return {r.rule: r for r in results if r.rule.startswith("regression/")}

    tail = gate("tail", [0.75, 0.875], 8.7e-4, 1.3e-4)
    assert tail["regression/abs_log_ratio_median"].status == "pass"
    assert tail["regression/token_kl"].status == "skip" and "median |log ratio|" in tail["regression/token_kl"].note
    assert "regression/repeat" not in tail
    moved = gate("moved", [0.75, 0.875], 5.4e-5, 1e-3)
    assert moved["regression/abs_log_ratio_median"].status == "fail"
    longer = gate("longer", [0.75, 0.9] + [0.9] * (checks.HEAVY_TAIL_MIN_STEPS - 2), 8.7e-4, 1.3e-4)
    assert longer["regression/token_kl"].status == "fail"


def test_a_quick_run_is_placed_step_by_step_in_the_band_of_the_longer_committed_runs_it_is_a_prefix_of(tmp_path):
    """A 4-step run against committed 8-step runs: its final reward is compared with theirs at step 4, and each of its
    training-reward steps and held-out points with their min–max at that step, widened by BAND_TOLERANCE."""
    committed = tmp_path / "committed"
    val = "val-core/tiny_sanity_val/acc/mean@4"
    curves = {42: [0.50, 0.55, 0.60, 0.65, 0.90, 0.92, 0.94, 0.95], 1: [0.52, 0.57, 0.62, 0.66, 0.91, 0.93, 0.95, 0.96],
              7: [0.48, 0.54, 0.58, 0.64, 0.89, 0.91, 0.93, 0.94]}
    for seed, curve in curves.items():
        records = [{"step": s, "data": {M.REWARD: r, **({val: 0.70 + 0.01 * (seed % 3)} if s in (4, 8) else {})}}
                   for s, r in enumerate(curve, start=1)]
        write_run(committed, "tiny", "sanity/grpo", "fp16", seed, [records])
    reference = logs.load_runs([committed], progress=False)

    def gate(name, rewards, held_out):
        records = [{"step": s, "data": {M.REWARD: r, **({val: held_out} if s == 4 else {})}}
                   for s, r in enumerate(rewards, start=1)]
        write_run(tmp_path / name, "tiny", "sanity/grpo", "fp16", 5, [records], stamp="20260202T000000Z")
        results = checks.run_checks(logs.load_runs([tmp_path / name], progress=False), reference=reference)
        return {r.rule: r for r in results if r.rule.startswith("regression/")}

    inside = gate("inside", [0.51, 0.58, 0.61, 0.66], 0.71)
    assert inside["regression/band"].status == "pass" and "5 point(s)" in inside["regression/band"].note
    assert inside["regression/reward"].status == "pass" and "at step 4" in inside["regression/reward"].note
    assert inside["regression/reward"].bound == "in 0.460-0.693"  # trailing means at step 4 (0.560-0.593) ± 0.1
    out = gate("out", [0.51, 0.50, 0.61, 0.70], 0.60)
    band = out["regression/band"]
    assert band.status == "fail" and band.value == 3
    assert "reward step 2: 0.500 below 0.540-0.570 by 0.040" in band.note and "step 4: 0.700 above" in band.note
    assert f"{val} step 4: 0.600 below" in band.note


def test_a_new_seed_passes_the_band_when_it_strays_no_more_than_the_committed_seeds_do_from_each_other(tmp_path):
    """Three committed seeds, one of which lies 0.05 above the others at 2 of 4 steps: each strays from the others'
    band at up to 50 % of the steps, so a fourth seed outside at 1 step of 4 passes, and one outside at all 4 fails."""
    committed = tmp_path / "committed"
    for seed, curve in {42: [0.50, 0.55, 0.60, 0.65], 1: [0.50, 0.55, 0.60, 0.65], 7: [0.55, 0.60, 0.60, 0.65]}.items():
        write_run(committed, "tiny", "sanity/grpo", "fp16", seed,
                  [[{"step": s, "data": {M.REWARD: r}} for s, r in enumerate(curve, start=1)]])
    reference = logs.load_runs([committed], progress=False)

    def band(name, rewards):
        write_run(tmp_path / name, "tiny", "sanity/grpo", "fp16", 5,
                  [[{"step": s, "data": {M.REWARD: r}} for s, r in enumerate(rewards, start=1)]],
                  stamp="20260202T000000Z")
        results = checks.run_checks(logs.load_runs([tmp_path / name], progress=False), reference=reference)
        return next(r for r in results if r.rule == "regression/band")

    draw = band("draw", [0.50, 0.55, 0.60, 0.75])
    assert draw.status == "pass" and "1 of 4 point(s) outside" in draw.note and "up to 50%" in draw.note
    assert band("off", [0.40, 0.45, 0.50, 0.55]).status == "fail"


def test_a_reference_root_keeps_one_run_of_a_name_per_cpu_kind_and_each_kind_repeats_its_own(tmp_path):
    """The 2-step reference holds sanity.grpo-fp16-s42 once per CPU kind: both are kept (one table per numerics),
    and a run repeats the one of its own numerics exactly."""
    reference = tmp_path / "reference"
    kinds = {"avx512": {"matrix_flags": ["avx2", "avx512_bf16", "avx512f"], "cpu_count": 2},
             "avx2": {"matrix_flags": ["avx2"], "cpu_count": 2}}
    values = {"avx512": [0.75, 0.875], "avx2": [0.75, 0.9375]}
    for stamp, kind in (("20261127T000000Z", "avx512"), ("20261203T000000Z", "avx2")):
        _gate_run(reference, 42, values[kind], 5e-5, stamp=stamp, hardware=kinds[kind], median=1e-3)
    tables = logs.load_committed_tables(reference)
    assert len(tables) == 2 and all(len(t.runs) == 1 for t in tables)
    assert logs.load_committed_tables(tmp_path / "absent") == []
    for kind in kinds:
        _gate_run(tmp_path / kind, 42, values[kind], 5e-5, stamp="20261204T000000Z", hardware=kinds[kind], median=1e-3)
        results = checks.run_checks(logs.load_runs([tmp_path / kind], progress=False), reference=tables)
        rules = {r.rule: r for r in results if r.rule.startswith("regression/")}
        assert rules["regression/repeat"].status == "pass", (kind, rules["regression/repeat"])


def test_a_run_on_other_numerics_is_told_apart_as_a_bit_for_bit_repeat_a_drifted_reproduction_or_another_draw(tmp_path):
    committed = tmp_path / "committed"
    curve = [0.55, 0.62, 0.70, 0.74, 0.80, 0.82, 0.85, 0.86]
    for seed, shift in ((42, 0.0), (1, 0.04), (7, -0.04)):
        _gate_run(committed, seed, [r + shift * (-1) ** i for i, r in enumerate(curve)], 1e-5)
    reference = logs.load_runs([committed], progress=False)
    intel = {"matrix_flags": ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512_fp16", "avx512f"], "cpu_count": 2}

    def drift(name, rewards, reference=reference):
        _gate_run(tmp_path / name, 42, rewards, 1e-5, stamp="20261205T000000Z", hardware=intel)
        results = checks.run_checks(logs.load_runs([tmp_path / name], progress=False), reference=reference)
        rules = {r.rule: r for r in results if r.rule.startswith("regression/")}
        assert "regression/repeat" not in rules
        return rules["regression/drift"]

    same = drift("same", curve)
    assert same.status == "pass" and "bit for bit" in same.note
    close = drift("close", [curve[0], *(r + 0.01 * (-1) ** i for i, r in enumerate(curve[1:]))])
    assert close.status == "pass" and "from step 2 on" in close.note and "a reproduction" in close.note
    assert f"{M.REWARD} 0.01" in close.note and math.isclose(close.value, 0.01 * math.sqrt(7 / 8), rel_tol=1e-6)
    far = drift("far", [r + 0.05 * (-1) ** i for i, r in enumerate(curve)])
    assert far.status == "fail" and "another draw" in far.note and "from step 1 on" in far.note
    alone = tmp_path / "alone"
    _gate_run(alone, 42, curve, 1e-5)
    lone = drift("lone", [r + 0.01 for r in curve], reference=logs.load_runs([alone], progress=False))
    assert lone.status == "skip" and "no two committed seeds" in lone.note


def test_output_locations_and_the_clone_path_do_not_change_a_configuration():
    """The key a run records at its start is the same in any clone; a manifest's recorded key is the one read."""
    from precision_rl.paths import REPO_ROOT

    base = {"scale": "tiny", "experiment": "sanity/grpo", "spec": {"hyper": {"lr": 1e-4}, "description": "x"},
            "extra_overrides": [f"reward.custom_reward_function.path={REPO_ROOT}/tests/r.py"]}
    moved = {**base, "spec": {"hyper": {"lr": 1e-4}, "description": "y"},
             "extra_overrides": ["reward.custom_reward_function.path=<repo>/tests/r.py", "trainer.save_freq=5",
                                 "trainer.rollout_data_dir=/tmp/x"]}
    key = runs.compute_configuration_key
    assert key(base) == key(moved)
    assert key(base) != key({**base, "spec": {"hyper": {"lr": 2e-4}}})
    assert key(base) != key({**base, "extra_overrides": ["data.seed=1"]})
    # a run made in another clone: the key it recorded then, not one computed with this clone's paths
    elsewhere = {**base, "extra_overrides": ["reward.custom_reward_function.path=/other/clone/tests/r.py"]}
    assert key(elsewhere) != key(base)
    assert runs.configuration_key({**elsewhere, runs.CONFIGURATION_FIELD: key(base)}) == key(base)


def test_a_quick_run_is_not_held_to_the_sanity_criterion_and_an_older_manifest_reads_as_calibrated(tmp_path):
    quick = {"profile": {"name": "quick", "stop_after_step": 25}}
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [[{"step": 1, "data": {M.REWARD: 0.5}}]], manifest=quick)
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [[{"step": 1, "data": {M.REWARD: 0.5}}]])
    table = logs.load_runs([tmp_path], progress=False)
    assert dict(zip(table.runs["seed"], table.runs["profile"], strict=True)) == {42: "quick", 1: "calibrated"}
    results = checks.run_checks(table)
    sanity = {r.run: r for r in results if r.rule == "sanity_reward"}
    assert sanity["sanity.grpo-fp16-s42"].status == "skip" and "PROFILE=calibrated" in sanity["sanity.grpo-fp16-s42"].note
    assert sanity["sanity.grpo-fp16-s1"].status == "fail"
    verdict = next(r for r in results if r.rule == "sanity_reward_over_seeds")
    assert "(1: 0.500)" in verdict.note and "42:" not in verdict.note  # the quick run does not count over seeds


def test_profile_narrows_the_runs_checked_to_that_profile(tmp_path):
    quick = {"profile": {"name": "quick", "stop_after_step": 25}}
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [[{"step": 1, "data": {M.REWARD: 0.5}}]], manifest=quick)
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [[{"step": 1, "data": {M.REWARD: 0.5}}]])
    table = logs.load_runs([tmp_path], progress=False)
    assert set(checks.select_runs(table.runs, None, profile="quick")["seed"]) == {42}
    assert set(checks.select_runs(table.runs, None, profile="calibrated")["seed"]) == {1}
    assert {r.run for r in checks.run_checks(table, profile="quick")} == {"sanity.grpo-fp16-s42"}
    only_quick = logs.load_runs([tmp_path / "tiny/sanity/grpo/fp16" / "s42-20260101T000000Z"], progress=False)
    with pytest.raises(UserError, match="in the calibrated profile"):
        checks.select_runs(only_quick.runs, None, profile="calibrated")


def test_publishing_refuses_a_tiny_run_of_another_instrument(tmp_path):
    records = [[{"step": 1, "data": {M.REWARD: 0.5}}]]
    retired = write_run(tmp_path / "runs", "tiny", "sanity/grpo", "fp16", 42, records,
                        manifest={"tiny_instrument": None})
    other = write_run(tmp_path / "runs", "tiny", "sanity/grpo", "fp16", 1, records,
                      manifest={"tiny_instrument": {"model_weights_sha256": "0" * 64, "problem_list_sha256": "1"}})
    shipped = write_run(tmp_path / "runs", "tiny", "sanity/grpo", "fp16", 7, records)
    with pytest.raises(UserError, match="retired 12-problem instrument"):
        publish.publish_runs([retired], tmp_path / "out")
    with pytest.raises(UserError, match="other model weights"):
        publish.publish_runs([other], tmp_path / "out")
    assert publish.publish_runs([shipped], tmp_path / "out")
    assert not (tmp_path / "out/tiny/sanity/grpo/fp16" / retired.name).exists()
    assert publish.publish_problem(runs.read_manifest(retired), registered_only=False) is None  # reference runs


def test_publishing_refuses_a_run_whose_algorithm_today_renders_otherwise(tmp_path):
    records = [[{"step": 1, "data": {M.REWARD: 0.5}}]]
    hyper = {"is_threshold": 3.0}
    current = verl_algorithm_overrides("pg_seq_mis", AlgorithmSettings(is_threshold=3.0))
    old_window = [o.replace("_inf", "_1000000.0") for o in current]
    stale = write_run(tmp_path / "runs", "tiny", "sanity/pg_seq_mis", "fp16", 42, records, algorithm="pg_seq_mis",
                      manifest={"spec": {"hyper": hyper}, "verl_overrides": ["data.seed=42", *old_window]})
    fresh = write_run(tmp_path / "runs", "tiny", "sanity/pg_seq_mis", "fp16", 1, records, algorithm="pg_seq_mis",
                      manifest={"spec": {"hyper": hyper}, "verl_overrides": ["data.seed=1", *current]})
    assert old_window != current
    with pytest.raises(UserError, match=r"rendered by an older suite .*rollout_rs_threshold=\"0.333\d*_inf\".*rerun"):
        publish.publish_runs([stale], tmp_path / "out")
    assert publish.publish_runs([fresh], tmp_path / "out")
    assert publish.publish_problem(runs.read_manifest(stale), registered_only=False) is None  # reference runs


@pytest.mark.parametrize("spec, why", [
    ({"hyper": ["is_threshold", 3.0]}, "spec.hyper must be a mapping"),
    ("a string", "needs hyper.is_threshold"),
    ({"hyper": {"is_threshold": "three"}}, "is_threshold must be a number, got 'three'"),
])
def test_publishing_names_a_hand_edited_manifest_whose_algorithm_cannot_be_rendered(tmp_path, spec, why):
    records = [[{"step": 1, "data": {M.REWARD: 0.5}}]]
    run = write_run(tmp_path / "runs", "tiny", "sanity/pg_seq_mis", "fp16", 42, records, algorithm="pg_seq_mis",
                    manifest={"spec": spec, "verl_overrides": ["data.seed=42"]})
    with pytest.raises(UserError, match=f"its algorithm cannot be rendered from its manifest .*{why}"):
        publish.publish_runs([run], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_one_committed_seed_is_no_band_for_another_seed_but_holds_a_rerun_of_its_own(tmp_path):
    committed = tmp_path / "committed"
    write_run(committed, "tiny", "sanity/grpo", "fp16", 42,
              [[{"step": s, "data": {M.REWARD: r}} for s, r in enumerate([0.50, 0.55, 0.60, 0.65], start=1)]])
    reference = logs.load_runs([committed], progress=False)

    def band(seed, rewards):
        root = tmp_path / f"s{seed}"
        write_run(root, "tiny", "sanity/grpo", "fp16", seed,
                  [[{"step": s, "data": {M.REWARD: r}} for s, r in enumerate(rewards, start=1)]],
                  stamp="20260202T000000Z")
        results = checks.run_checks(logs.load_runs([root], progress=False), reference=reference)
        return next(r for r in results if r.rule == "regression/band")

    other = band(1, [0.40, 0.55, 0.70, 0.65])
    assert other.status == "skip" and other.value == 2
    assert other.note.startswith("no band: one committed seed (42), and seed 1 is another draw (2 of 4 point(s)")
    rerun = band(42, [0.50, 0.55, 0.70, 0.65])
    assert rerun.status == "fail" and "step 3: 0.700 above 0.600-0.600" in rerun.note
