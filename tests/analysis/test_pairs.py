"""FP16 beside BF16 seed by seed: which runs pair, the ratios and counts, the Markdown, the README block."""

import math

import pandas as pd
import pytest

from precision_rl.analysis import pairs
from precision_rl.analysis.tables import SUMMARY_COLUMNS
from precision_rl.errors import UserError


def run(experiment, precision, seed, final, diff=1e-4, kl=1e-6, diff_last=None, status="finished", wall=100.0,
        scale="tiny"):
    row = dict.fromkeys(SUMMARY_COLUMNS, math.nan)
    row.update(scale=scale, experiment=experiment, precision=precision, seed=seed, status=status,
               final_reward=final, mean_abs_diff_first=diff, token_kl_k3_first=kl,
               mean_abs_diff_last=diff if diff_last is None else diff_last, wall_time_s=wall)
    return row


@pytest.fixture
def summary():
    return pd.DataFrame([
        run("sanity/grpo", "fp16", 42, 0.96, diff=1e-4, kl=1e-6, diff_last=0.5e-4, wall=500),
        run("sanity/grpo", "bf16", 42, 0.90, diff=6e-4, kl=7e-5, diff_last=3e-4, wall=400),
        run("sanity/grpo", "fp16", 1, 0.89, diff=1e-4, kl=1e-6, wall=600),
        run("sanity/grpo", "bf16", 1, 0.8904, diff=5e-4, kl=4e-5, diff_last=6e-4, wall=420),
        run("sanity/grpo", "fp16", 7, 0.88),
        run("sanity/grpo", "bf16", 7, 0.99, status="interrupted"),
        run("sanity/grpo", "train_bf16-infer_fp16", 42, 0.5),
        run("moe/pg_seq_tis", "fp16", 42, 0.70, wall=300),
        run("moe/pg_seq_tis", "bf16", 42, 0.75, diff=5e-4, kl=5e-5, wall=250),
        run("sanity/grpo", "fp16", 42, 0.97, scale="paper"),
    ])


def test_only_seeds_with_both_arms_finished_pair_and_mixed_precision_is_no_arm(summary):
    paired = pairs.pair_runs(summary)
    assert list(paired.columns) == list(pairs.PAIR_COLUMNS)
    assert [tuple(r) for r in paired[["scale", "experiment", "seed"]].itertuples(index=False)] == [
        ("tiny", "moe/pg_seq_tis", 42), ("tiny", "sanity/grpo", 1), ("tiny", "sanity/grpo", 42)]


def test_ratios_trends_and_the_higher_arm(summary):
    paired = pairs.pair_runs(summary).set_index(["experiment", "seed"])
    seed42 = paired.loc[("sanity/grpo", 42)]
    assert seed42["higher"] == "fp16"
    assert seed42["mean_abs_diff_ratio"] == pytest.approx(6.0) and seed42["token_kl_k3_ratio"] == pytest.approx(70)
    assert seed42["fp16_mismatch_trend"] == pytest.approx(0.5) and seed42["bf16_mismatch_trend"] == pytest.approx(0.5)
    assert paired.loc[("sanity/grpo", 1), "higher"] == pairs.LEVEL  # 0.890 and 0.8904 read the same
    assert paired.loc[("sanity/grpo", 1), "bf16_mismatch_trend"] == pytest.approx(1.2)
    assert paired.loc[("moe/pg_seq_tis", 42), "higher"] == "bf16"


def test_the_markdown_splits_the_sanity_test_from_the_other_families(summary):
    text = pairs.scale_section(pairs.pair_runs(summary), "tiny")
    sanity, others = text.splitlines()[:2]
    assert sanity.startswith("- **The sanity test**: 2 pairs over 1 experiment.")
    assert "5.0x–6.0x FP16's" in sanity and "40x–70x in k3 KL" in sanity
    assert "higher with FP16 in 1 and with BF16 in 0 (level in 1)" in sanity
    assert "grows in 0 FP16 and 1 BF16 runs" in sanity
    assert "FP16 500–600 s (median 550), BF16 400–420 s (median 410)" in sanity
    assert others.startswith("- **The other families**: 1 pair over 1 experiment.")
    row = next(line for line in text.splitlines() if line.startswith("| sanity/grpo"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:7] == ["1 / 42", "0.890 / 0.960", "0.890 / 0.900", "0.925 [0.890–0.960]", "0.895 [0.890–0.900]",
                          "FP16 1, level 1"]
    assert pairs.scale_section(pairs.pair_runs(summary), "paper") == "No experiment has finished both arms at paper scale."


def test_the_readme_block_holds_the_tiny_section_between_its_markers(summary):
    paired = pairs.pair_runs(summary)
    block = pairs.readme_block(paired)
    assert block == f"{pairs.README_BEGIN}\n{pairs.scale_section(paired, 'tiny')}\n{pairs.README_END}"
    stale = f"intro\n\n{pairs.README_BEGIN}\nstale numbers\n{pairs.README_END}\n\nrest\n"
    assert pairs.readme_with_block(stale, paired) == f"intro\n\n{block}\n\nrest\n"
    with pytest.raises(UserError, match="exactly one block"):
        pairs.readme_with_block("no block at all\n", paired)


def test_write_pairs_writes_csv_and_markdown(summary, tmp_path):
    csv_path, md_path = pairs.write_pairs(pairs.pair_runs(summary), tmp_path)
    assert len(pd.read_csv(csv_path)) == 3
    assert md_path.read_text().startswith("# FP16 beside BF16, seed by seed\n\n## tiny scale\n")


def test_evaluation_only_runs_have_no_training_reward_and_are_not_paired(summary):
    evaluated = pd.concat([summary, pd.DataFrame([run("eval/inference_precision_8k", arm, 42, math.nan)
                                                  for arm in ("fp16", "bf16")])], ignore_index=True)
    assert pairs.pair_runs(evaluated).equals(pairs.pair_runs(summary))
