"""FP16 beside BF16, seed by seed (``make tables`` → ``results/precision_pairs.{csv,md}``).

A pair is one experiment and seed whose FP16 and BF16 runs both finished. For each pair: both final rewards, the
arm that ends higher, how many times BF16's rollout/training mismatch is FP16's over the first TREND_WINDOW logged
steps, and each arm's mismatch trend (its median over the last TREND_WINDOW steps over that of the first: above 1,
the mismatch grew, the paper's feedback loop before a BF16 collapse). results/README.md's pairs block is the
tiny-scale section of the Markdown, rewritten by
``make published-results`` so that its numbers are always the committed logs'.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from precision_rl.analysis.checks import SANITY_FAMILY
from precision_rl.analysis.paper_compare import ARMS
from precision_rl.analysis.readme_blocks import README_SCALE, ReadmeBlock
from precision_rl.analysis.series import TRAIL_WINDOW
from precision_rl.analysis.tables import TREND_WINDOW, write_csv_and_markdown
from precision_rl.console import render_table
from precision_rl.launch.runs import FINISHED

PAIR_COLUMNS = (
    "scale", "experiment", "seed", "fp16_final", "bf16_final", "higher", "mean_abs_diff_ratio", "token_kl_k3_ratio",
    "fp16_mismatch_trend", "bf16_mismatch_trend", "fp16_wall_s", "bf16_wall_s",
)
PAIRS_CSV, PAIRS_MD = "precision_pairs.csv", "precision_pairs.md"
LEVEL = "level"
README_BEGIN = "<!-- precision pairs (tiny scale): written by `make published-results` from results/logs -->"
README_END = "<!-- end of precision pairs -->"
README_BLOCK = ReadmeBlock(README_BEGIN, README_END)
_PER_RUN = {"final_reward": "final", "wall_time_s": "wall_s", "mean_abs_diff_first": "diff", "token_kl_k3_first": "kl",
            "mean_abs_diff_last": "diff_last"}


def _higher(fp16: float, bf16: float) -> str:
    """Return the arm whose final reward is higher at the three decimals shown, or LEVEL."""
    return LEVEL if round(fp16, 3) == round(bf16, 3) else ("fp16" if fp16 > bf16 else "bf16")


def pair_runs(summary: pd.DataFrame) -> pd.DataFrame:
    """Return one row per (scale, experiment, seed) whose FP16 and BF16 runs both finished training (columns
    PAIR_COLUMNS), sorted; runs of mixed precision (train one dtype, infer another) and runs without a training
    reward (the evaluation-only experiments) are not arms of a pair."""
    finished = summary[(summary["status"] == FINISHED) & summary["precision"].isin(ARMS)
                       & summary["final_reward"].notna()]
    arms = {arm: finished[finished["precision"] == arm].set_index(["scale", "experiment", "seed"])[list(_PER_RUN)]
            .rename(columns=lambda c, arm=arm: f"{arm}_{_PER_RUN[c]}") for arm in ARMS}
    both = arms["fp16"].join(arms["bf16"], how="inner").reset_index()
    both["higher"] = [_higher(f, b) for f, b in zip(both["fp16_final"], both["bf16_final"], strict=True)]
    both["mean_abs_diff_ratio"] = both["bf16_diff"] / both["fp16_diff"]
    both["token_kl_k3_ratio"] = both["bf16_kl"] / both["fp16_kl"]
    for arm in ARMS:
        both[f"{arm}_mismatch_trend"] = both[f"{arm}_diff_last"] / both[f"{arm}_diff"]
    both["seed"] = both["seed"].astype(int)
    return both[list(PAIR_COLUMNS)].sort_values(["scale", "experiment", "seed"], ignore_index=True)


def _times(ratio: float) -> str:
    return "" if pd.isna(ratio) else (f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x")


def _range(values: pd.Series, fmt) -> str:
    low, high = fmt(values.min()), fmt(values.max())
    return low if low == high else f"{low}–{high}"


def _count_of(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _band(values: pd.Series) -> str:
    if len(values) == 1:
        return f"{values.iloc[0]:.3f}"
    return f"{values.mean():.3f} [{values.min():.3f}–{values.max():.3f}]"


def _count(higher: pd.Series) -> str:
    counts = higher.value_counts()
    return ", ".join(f"{arm.upper() if arm in ARMS else arm} {counts[arm]}" for arm in (*ARMS, LEVEL)
                     if arm in counts)


def _experiment_rows(pairs: pd.DataFrame) -> list[list[str]]:
    rows = []
    for experiment, group in pairs.groupby("experiment", sort=True):
        rows.append([
            experiment, " / ".join(map(str, group["seed"])),
            " / ".join(f"{v:.3f}" for v in group["fp16_final"]), " / ".join(f"{v:.3f}" for v in group["bf16_final"]),
            _band(group["fp16_final"]), _band(group["bf16_final"]), _count(group["higher"]),
            " / ".join(f"{_times(d)}, {_times(k)}" for d, k in zip(group["mean_abs_diff_ratio"],
                                                                  group["token_kl_k3_ratio"], strict=True)),
        ])
    return rows


HEADERS = ("experiment", "seeds", "FP16 final (per seed)", "BF16 final (per seed)", "FP16 mean [min–max]",
           "BF16 mean [min–max]", "higher (pairs)", "BF16/FP16 mismatch: mean |π−μ|, k3 KL (per seed)")


def digest(pairs: pd.DataFrame) -> str:
    """Return a few sentences over ``pairs``: how many pairs, the range of BF16/FP16 mismatch ratios, which arm ends
    higher how often, each arm's mismatch trend, and the range and median of each arm's wall time per run."""
    counts = pairs["higher"].value_counts()
    higher = f"with FP16 in {counts.get('fp16', 0)} and with BF16 in {counts.get('bf16', 0)}"
    if counts.get(LEVEL, 0):
        higher += f" (level in {counts[LEVEL]})"
    trends = {arm: pairs[f"{arm}_mismatch_trend"] for arm in ARMS}
    trend = (f"From the first {TREND_WINDOW} steps to the last, the mismatch changes by a factor "
             + " and ".join(f"{_range(t, lambda v: f'{v:.2f}')} ({arm.upper()})" for arm, t in trends.items())
             + "; it grows in " + " and ".join(f"{int((t > 1).sum())} {arm.upper()}" for arm, t in trends.items())
             + " runs.")
    walls = {arm: pairs[f"{arm}_wall_s"].dropna() for arm in ARMS}
    wall_text = ", ".join(f"{arm.upper()} {_range(w, lambda v: f'{v:.0f}')} s (median {w.median():.0f})"
                          for arm, w in walls.items() if not w.empty)
    return (f"{_count_of(len(pairs), 'pair')} over {_count_of(pairs['experiment'].nunique(), 'experiment')}. "
            "BF16's mismatch is "
            f"{_range(pairs['mean_abs_diff_ratio'], _times)} FP16's in mean \\|π−μ\\| and "
            f"{_range(pairs['token_kl_k3_ratio'], _times)} in k3 KL. The final reward is higher {higher}. "
            f"{trend} "
            f"Wall time per run: {wall_text}.")


def scale_section(pairs: pd.DataFrame, scale: str) -> str:
    """Return the Markdown of one scale: a digest of the sanity test's pairs and one of the other families', then
    one table row per experiment (or a line saying that no pair has finished)."""
    group = pairs[pairs["scale"] == scale]
    if group.empty:
        return f"No experiment has finished both arms at {scale} scale."
    sanity = group["experiment"].str.split("/").str[0] == SANITY_FAMILY
    lines = [f"- **{title}**: {digest(part)}" for title, part in
             (("The sanity test", group[sanity]), ("The other families", group[~sanity])) if not part.empty]
    table = render_table(_experiment_rows(group), HEADERS, markdown=True, floatfmt="").replace("|π−μ|", "\\|π−μ\\|")
    return "\n".join(lines) + f"\n\n{table}"


def to_markdown(pairs: pd.DataFrame) -> str:
    """Return the pairs as a Markdown document: one section per scale with a pair, the definitions below."""
    parts = ["# FP16 beside BF16, seed by seed", ""]
    scales = sorted(pairs["scale"].unique()) or [README_SCALE]
    for scale in scales:
        parts += [f"## {scale} scale", "", scale_section(pairs, scale), ""]
    parts += [
        f"Definitions: a pair is one experiment and seed whose FP16 and BF16 runs both finished; final = the "
        f"trailing mean of the last {TRAIL_WINDOW} logged rewards; higher counts the pairs whose final reward is "
        f"higher with each arm at three decimals (level: equal); the mismatch ratios are BF16's median of "
        f"`training/rollout_probs_diff_mean` and of `rollout_corr/k3_kl` over the first {TREND_WINDOW} logged "
        f"steps divided by FP16's; mismatch trend = an arm's median `training/rollout_probs_diff_mean` over the "
        f"last {TREND_WINDOW} logged steps over that of its first {TREND_WINDOW}; wall time from the manifests "
        "(`results/summary.csv`).",
        "",
    ]
    return "\n".join(parts)


def write_pairs(pairs: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``precision_pairs.csv`` and ``precision_pairs.md`` into ``out_dir`` atomically; return both paths."""
    return write_csv_and_markdown(pairs, to_markdown(pairs), Path(out_dir) / PAIRS_CSV, Path(out_dir) / PAIRS_MD)


def readme_block(pairs: pd.DataFrame) -> str:
    """Return the README's results block: the markers around the README_SCALE section."""
    return README_BLOCK.render(scale_section(pairs, README_SCALE))


def readme_with_block(text: str, pairs: pd.DataFrame) -> str:
    """Return ``text`` (a README) with its results block replaced by the one ``pairs`` give; UserError when the
    README has no block between README_BEGIN and README_END."""
    return README_BLOCK.replace(text, scale_section(pairs, README_SCALE))
