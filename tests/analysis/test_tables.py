"""The results table: peak, final and collapse of the reward, accuracy, mismatch, skipped steps, wall time."""

import math

import pandas as pd
import pytest

from precision_rl import metrics as M
from precision_rl.analysis import logs
from precision_rl.analysis.series import TRAIL_WINDOW, collapse_step, summarize_reward, trailing_mean
from precision_rl.analysis.synthetic import write_run
from precision_rl.analysis.tables import TREND_WINDOW, summarize, to_markdown, write_summary

VAL = "val-core/tiny_sanity_val/acc/mean@4"
# Planted collapse: the reward climbs to 0.8 (steps 10-15), then drops to 0.05 from step 16 on. With the
# 5-step trailing mean the peak is 0.8 and the mean falls below 0.4 at step 18: (0.8 + 0.8 + 3 x 0.05) / 5 = 0.35.
COLLAPSED = [0.5 + 0.3 * min(s, 10) / 10 if s <= 15 else 0.05 for s in range(1, 31)]
HEALTHY = [min(0.98, 0.5 + 0.05 * s) for s in range(1, 31)]


def records(rewards, extra=lambda step: {}):
    return [{"step": s, "data": {M.REWARD: r, **extra(s)}} for s, r in enumerate(rewards, start=1)]


@pytest.fixture
def table(tmp_path):
    def fp16_extra(step):
        return {M.GRAD_NORM: float("nan") if step in (4, 9) else 1.0, M.PROBS_DIFF_ABS_MEAN: 7e-4,
                M.TOKEN_KL_K1: 2e-5, M.TOKEN_KL_K3: 1e-5, **({VAL: 0.1 * step / 10} if step % 10 == 0 else {})}

    def bf16_extra(step):
        return {M.PROBS_DIFF_ABS_MEAN: 0.004 if step < 16 else 0.05, M.TOKEN_KL_K3: 1e-3}

    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [records(HEALTHY, fp16_extra)],
              manifest={"attempts": [{"attempt": 0, "started": "20260101T000000Z", "ended": "20260101T010000Z"},
                                     {"attempt": 1, "started": "20260101T020000Z", "ended": "20260101T023000Z"}]})
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 1, [records(COLLAPSED, bf16_extra)])
    counted = [{"step": s, "data": {M.REWARD: 0.5, M.SKIPPED_STEPS: float(c), M.STEP_TIME: 2.0}}
               for s, c in enumerate([0, 0, 1, 3], start=1)]
    write_run(tmp_path, "paper", "sanity/gspo", "fp16", 2, [counted], algorithm="gspo",
              manifest={"attempts": []})
    return logs.load_runs([tmp_path], progress=False)


def row(summary, run, scale="tiny"):
    return summary[(summary["run"] == run) & (summary["scale"] == scale)].iloc[0]


def test_collapse_detection_finds_the_planted_collapse(table):
    summary = summarize(table)
    bf16 = row(summary, "sanity.grpo-bf16-s1")
    assert TRAIL_WINDOW == 5
    assert bf16["collapse_step"] == 18
    assert bf16["peak_reward"] == pytest.approx(0.8)
    assert 10 <= bf16["peak_step"] <= 15
    assert bf16["final_reward"] == pytest.approx(0.05)
    assert pd.isna(row(summary, "sanity.grpo-fp16-s1")["collapse_step"])


def test_collapse_needs_the_whole_tail_below_half():
    recovering = pd.Series([0.2, 0.8, 0.8, 0.1, 0.1, 0.7, 0.8], index=range(1, 8))
    assert collapse_step(recovering) is None
    dropped = pd.Series([0.2, 0.8, 0.8, 0.1, 0.1, 0.1], index=range(10, 70, 10))
    assert collapse_step(dropped) == 40
    assert summarize_reward(pd.Series([], dtype=float)) is None
    assert list(trailing_mean(pd.Series([1.0, 2.0, 3.0]), 2)) == [1.5, 2.5]


def test_summary_columns(table):
    summary = summarize(table)
    assert len(summary) == 3
    fp16 = row(summary, "sanity.grpo-fp16-s1")
    assert fp16["last_step"] == 30 and fp16["final_reward"] == pytest.approx(0.98)
    assert fp16["val_set"] == "tiny_sanity_val"
    assert fp16["val_final"] == pytest.approx(0.3) and fp16["val_peak"] == pytest.approx(0.3)
    assert fp16["median_mean_abs_diff"] == pytest.approx(7e-4)
    assert fp16["median_token_kl_k1"] == pytest.approx(2e-5) and fp16["median_token_kl_k3"] == pytest.approx(1e-5)
    assert fp16["skipped_steps"] == 2  # non-finite actor/grad_norm at steps 4 and 9
    assert fp16["wall_time_s"] == pytest.approx(5400.0)  # 1 h + 30 min of attempts
    bf16 = row(summary, "sanity.grpo-bf16-s1")
    assert math.isnan(bf16["skipped_steps"])  # bf16 has no loss scaler
    assert bf16["median_mean_abs_diff"] == pytest.approx((0.004 + 0.05) / 2)  # 15 steps each side
    assert TREND_WINDOW == 10  # the planted mismatch grows at step 16: the first 10 steps see 0.004, the last 0.05
    assert (bf16["mean_abs_diff_first"], bf16["mean_abs_diff_last"]) == pytest.approx((0.004, 0.05))
    assert bf16["token_kl_k3_first"] == bf16["token_kl_k3_last"] == pytest.approx(1e-3)
    assert math.isnan(row(summary, "sanity.gspo-fp16-s2", "paper")["token_kl_k3_first"])  # no k3 logged
    gspo = row(summary, "sanity.gspo-fp16-s2", "paper")
    assert gspo["skipped_steps"] == 3  # the last cumulative precision/skipped_steps
    assert gspo["wall_time_s"] == pytest.approx(8.0)  # no attempt times: the sum of timing_s/step
    assert gspo["val_set"] == "aime24" and math.isnan(gspo["val_final"])


def test_write_summary(table, tmp_path):
    summary = summarize(table)
    csv_path, md_path = write_summary(summary, tmp_path / "results")
    assert pd.read_csv(csv_path).shape == summary.shape
    text = md_path.read_text()
    assert "## paper scale" in text and "## tiny scale" in text
    assert "| sanity/grpo" in text and "none" in text and " 18 " in text and "1:30:00" in text
    assert "No runs found." in to_markdown(summarize(logs.build_table([])))
