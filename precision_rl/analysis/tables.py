"""The results table: one row per run with the numbers the paper reports (``make tables`` →
``results/summary.{csv,md}``).

Reward statistics use the trailing mean of ``series.TRAIL_WINDOW`` logged steps; the collapse step is the first
step after the peak from which that mean stays below half the peak (none if it recovers or never drops). The
mismatch's trend over training (the paper's feedback loop: it grows before BF16 collapses) is its median over the
first and over the last TREND_WINDOW logged steps.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl import metrics as M
from precision_rl.analysis.logs import RunTable
from precision_rl.analysis.series import TRAIL_WINDOW, SeriesIndex, summarize_reward
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.registry import experiment_files, load_experiment
from precision_rl.config.scale import SCALES
from precision_rl.fileio import atomic_path, atomic_write_text

SUMMARY_COLUMNS = (
    "scale", "experiment", "precision", "seed", "run", "status", "profile", "last_step", "peak_reward", "peak_step",
    "final_reward", "collapse_step", "val_set", "val_final", "val_peak", "median_mean_abs_diff", "median_token_kl_k1",
    "median_token_kl_k3", "mean_abs_diff_first", "mean_abs_diff_last", "token_kl_k3_first", "token_kl_k3_last",
    "skipped_steps", "wall_time_s",
)
TREND_COLUMNS = ("mean_abs_diff_first", "mean_abs_diff_last", "token_kl_k3_first", "token_kl_k3_last")
TREND_WINDOW = 10
SUMMARY_CSV, SUMMARY_MD = "summary.csv", "summary.md"


@lru_cache(maxsize=None)
def _registry_val_sets(experiment: str, scale: str) -> tuple[str, ...]:
    return load_experiment(experiment, scale).data.val if experiment in experiment_files() else ()


def first_val_set(experiment: str, scale: str, logged: frozenset[str]) -> str | None:
    """Return the validation set a run of ``experiment`` at ``scale`` is judged on: the experiment's first, else the
    first data source with a core validation metric among ``logged``; None where there is none."""
    val = _registry_val_sets(experiment, scale) if scale in SCALES else ()
    if val:
        return val[0]
    sources = M.val_data_sources(logged)
    return sources[0] if sources else None


def _median(series: pd.Series | None) -> float:
    return float(series.median()) if series is not None and not series.empty else np.nan


def _first_and_last(series: pd.Series | None) -> tuple[float, float]:
    """Return the medians over the first and the last TREND_WINDOW logged steps of ``series`` (NaN when absent)."""
    if series is None or series.empty:
        return np.nan, np.nan
    ordered = series.sort_index()
    return float(ordered.iloc[:TREND_WINDOW].median()), float(ordered.iloc[-TREND_WINDOW:].median())


def skipped_steps(index: SeriesIndex, scale: str, run: str, train_dtype: str) -> float:
    """Return the run's skipped fp16 steps: the last ``precision/skipped_steps`` value, else (fp16 training only)
    the steps whose ``actor/grad_norm`` was logged non-finite (verl's sign of a scaler skip); NaN if unknown."""
    counted = index.quantity(scale, run, M.SKIPPED_STEPS_Q)
    if counted is not None and not counted.empty:
        return float(counted.iloc[-1])
    if train_dtype != "fp16":
        return np.nan
    grad = index.quantity(scale, run, M.GRAD_NORM_Q, dropna=False)
    return float(grad.isna().sum()) if grad is not None else np.nan


def summarize(table: RunTable) -> pd.DataFrame:
    """Return the summary table: one row per run of ``table`` (columns SUMMARY_COLUMNS), sorted."""
    index = SeriesIndex(table.metrics)
    rows = []
    for run in table.runs.itertuples(index=False):
        scale, name = str(run.scale), str(run.run)
        logged = index.logged(scale, name)
        reward = summarize_reward(index.quantity(scale, name, M.REWARD_Q))
        val_set = first_val_set(str(run.experiment), scale, logged)
        val_name = M.val_metric(logged, val_set) if val_set else None
        val = index.get(scale, name, val_name) if val_name else None
        wall = run.wall_time_s
        if wall is None or not np.isfinite(wall):
            steps = index.quantity(scale, name, M.STEP_TIME_Q)
            wall = float(steps.sum()) if steps is not None and not steps.empty else np.nan
        diff_first, diff_last = _first_and_last(index.quantity(scale, name, M.MEAN_ABS_DIFF_Q))
        kl_first, kl_last = _first_and_last(index.quantity(scale, name, M.TOKEN_KL_K3_Q))
        label = PrecisionArm(run.precision_train, run.precision_infer).label
        rows.append({
            "scale": scale, "experiment": run.experiment, "precision": label, "seed": int(run.seed), "run": name,
            "status": run.status, "profile": str(run.profile), "last_step": reward.last_step if reward else None,
            "peak_reward": reward.peak if reward else np.nan, "peak_step": reward.peak_step if reward else None,
            "final_reward": reward.final if reward else np.nan,
            "collapse_step": reward.collapse_step if reward else None,
            "val_set": val_set, "val_final": float(val.iloc[-1]) if val is not None and len(val) else np.nan,
            "val_peak": float(val.max()) if val is not None and len(val) else np.nan,
            "median_mean_abs_diff": _median(index.quantity(scale, name, M.MEAN_ABS_DIFF_Q)),
            "median_token_kl_k1": _median(index.quantity(scale, name, M.TOKEN_KL_K1_Q)),
            "median_token_kl_k3": _median(index.quantity(scale, name, M.TOKEN_KL_K3_Q)),
            "mean_abs_diff_first": diff_first, "mean_abs_diff_last": diff_last,
            "token_kl_k3_first": kl_first, "token_kl_k3_last": kl_last,
            "skipped_steps": skipped_steps(index, scale, name, str(run.precision_train)),
            "wall_time_s": wall,
        })
    frame = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    for col in ("last_step", "peak_step", "collapse_step"):
        frame[col] = frame[col].astype("Int64")
    return frame.sort_values(["scale", "experiment", "precision", "seed"], ignore_index=True)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def to_markdown(summary: pd.DataFrame) -> str:
    """Return the summary as a Markdown document: one table per scale, with the definitions underneath."""
    parts = ["# Results summary", ""]
    if summary.empty:
        parts += ["No runs found.", ""]
    shown = summary.drop(columns=["run"]).copy()
    for col in ("peak_reward", "final_reward", "val_final", "val_peak"):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.3f}")
    for col in ("median_mean_abs_diff", "median_token_kl_k1", "median_token_kl_k3", *TREND_COLUMNS):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.2e}")
    shown["skipped_steps"] = shown["skipped_steps"].map(lambda v: "" if pd.isna(v) else f"{v:.0f}")
    shown["wall_time_s"] = shown["wall_time_s"].map(lambda v: "" if pd.isna(v) else _hms(v))
    shown["collapse_step"] = shown["collapse_step"].map(lambda v: "none" if pd.isna(v) else str(v))
    shown = shown.rename(columns={"wall_time_s": "wall_time"})
    for scale, group in shown.groupby("scale", sort=True):
        parts += [f"## {scale} scale", "", group.drop(columns=["scale"]).to_markdown(index=False, disable_numparse=True), ""]
    parts += [
        "Definitions: rewards are `critic/score/mean` smoothed by a trailing mean over "
        f"{TRAIL_WINDOW} logged steps; peak = its maximum, final = its last value; collapse_step = first step after "
        "the peak from which it stays below half the peak (none: no collapse); val = the first validation set's "
        "`val-core/<set>/acc/mean@n`; mismatch medians are over steps (`training/rollout_probs_diff_mean`, "
        "`rollout_corr/kl`, `rollout_corr/k3_kl`, actor/ prefix in bypass mode); *_first / *_last = medians of "
        f"`training/rollout_probs_diff_mean` and `rollout_corr/k3_kl` over the first / last {TREND_WINDOW} logged "
        "steps (the mismatch's trend over training); skipped_steps = fp16 "
        "loss-scaler skips (`precision/skipped_steps`, else non-finite `actor/grad_norm`); wall_time (h:mm:ss) from the "
        "manifest's attempts (else the sum of `timing_s/step`).",
        "",
    ]
    return "\n".join(parts)


def write_csv_and_markdown(frame: pd.DataFrame, markdown: str, csv_path: Path, md_path: Path) -> tuple[Path, Path]:
    """Write ``frame`` as CSV to ``csv_path`` and ``markdown`` to ``md_path``, each atomically; return both paths."""
    with atomic_path(Path(csv_path)) as tmp:
        frame.to_csv(tmp, index=False)
    return Path(csv_path), atomic_write_text(Path(md_path), markdown)


def write_summary(summary: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``summary.csv`` and ``summary.md`` into ``out_dir`` atomically; return both paths."""
    return write_csv_and_markdown(summary, to_markdown(summary), Path(out_dir) / SUMMARY_CSV,
                                  Path(out_dir) / SUMMARY_MD)
