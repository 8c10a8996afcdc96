"""The words a run ends with: reward and held-out from start to end, the BF16/FP16 ratio, and the gate's verdicts."""

from precision_rl import metrics as M
from precision_rl.analysis import logs
from precision_rl.analysis.checks import CommittedRuns
from precision_rl.analysis.closing import NO_BAND, closing_lines
from precision_rl.analysis.synthetic import write_run

VAL = "val-core/tiny_sanity_val/acc/mean@4"


def _run(root, arm, seed, rewards, diff, stamp="20260101T000000Z"):
    records = [{"step": 0, "data": {VAL: 0.70}}]
    records += [{"step": s, "data": {M.REWARD: r, M.PROBS_DIFF_ABS_MEAN: diff, M.TOKEN_KL_K3: diff ** 2,
                                     **({VAL: 0.72} if s == len(rewards) else {})}}
                for s, r in enumerate(rewards, start=1)]
    return write_run(root, "tiny", "sanity/grpo", arm, seed, [records], stamp=stamp)


def test_a_finished_pair_is_told_in_words_against_the_committed_band(tmp_path):
    for seed, shift in ((42, 0.0), (1, 0.02), (7, -0.02)):
        for arm, diff in (("fp16", 1e-4), ("bf16", 5e-4)):
            _run(tmp_path / "committed", arm, seed, [0.50 + shift, 0.55 + shift, 0.60 + shift], diff)
    committed = CommittedRuns.of(logs.load_committed_tables(tmp_path / "committed"))
    fresh = [_run(tmp_path / "runs", arm, 42, [0.50, 0.56, 0.60], diff, stamp="20260202T000000Z")
             for arm, diff in (("fp16", 1e-4), ("bf16", 5e-4))]
    lines = closing_lines(fresh, committed)
    bf16 = next(line for line in lines if line.startswith("sanity.grpo-bf16-s42: "))
    assert "training reward 0.500 at step 1 -> 0.553 (trailing mean) at step 3" in bf16
    assert "held-out accuracy 0.700 at step 0 -> 0.720 at step 3" in bf16
    assert "BF16/FP16 mismatch (medians over steps): Mean |π − μ| x5.0, KL[μ‖π] per token x25.0" in bf16
    assert "band PASS" in bf16 and "repeat FAIL" in bf16  # same seed and numerics, one value moved
    assert not any("BF16/FP16" in line for line in lines if line.startswith("sanity.grpo-fp16-s42"))


def test_a_run_with_no_committed_run_of_its_configuration_says_what_to_publish(tmp_path):
    lines = closing_lines([_run(tmp_path / "runs", "fp16", 42, [0.5, 0.6], 1e-4)], CommittedRuns())
    assert lines == [f"sanity.grpo-fp16-s42: training reward 0.500 at step 1 -> 0.550 (trailing mean) at step 2; "
                     f"held-out accuracy 0.700 at step 0 -> 0.720 at step 2; {NO_BAND}"]


def test_a_run_outside_the_band_says_how_many_of_its_points_are_and_which(tmp_path):
    for seed, shift in ((42, 0.0), (1, 0.02), (7, -0.02)):
        _run(tmp_path / "committed", "fp16", seed, [0.50 + shift, 0.55 + shift, 0.60 + shift], 1e-4)
    committed = CommittedRuns.of(logs.load_committed_tables(tmp_path / "committed"))
    line = closing_lines([_run(tmp_path / "runs", "fp16", 5, [0.30, 0.55, 0.90], 1e-4, stamp="20260202T000000Z")],
                         committed)[0]
    assert "band FAIL (2 of 5 point(s) outside the committed seeds 1, 7, 42" in line
    assert "reward step 1: 0.300 below 0.480-0.520 by 0.180" in line
