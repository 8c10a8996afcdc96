"""Benchmark of the analysis path (``make bench-analysis``): a synthetic set of 1,000,000 metric values (many
runs × steps × ~40 metrics, every registry arm at paper scale) → load into the tidy table → every figure.

Goal (issue 6): load + all figures ≤ 30 s on the 2-core development machine.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from precision_rl.analysis.figures import FIGURES, FigureData, draw_all
from precision_rl.analysis.logs import load_runs, save_table
from precision_rl.analysis.synthetic import run_records, write_mismatch_result, write_run
from precision_rl.config.registry import load_all
from precision_rl.config.scale import PAPER, SCALES
from precision_rl.paths import MISMATCH_DIR

GOAL_S = 30.0


def write_synthetic_set(root: Path, values: int, steps: int, n_metrics: int, seed: int = 0) -> tuple[int, int]:
    """Write synthetic paper-scale runs under ``root`` until about ``values`` values; return (runs, jsonl lines)."""
    rng = np.random.default_rng(seed)
    arms = [(spec, arm) for spec in load_all(PAPER).values() for arm in spec.arms]
    per_run = steps * n_metrics
    n_runs = max(1, round(values / per_run))
    lines = 0
    for k in range(n_runs):
        spec, arm = arms[k % len(arms)]
        collapse = steps // 2 if arm.coarsest == "bf16" and spec.algorithm in ("grpo", "gspo") else None
        records = run_records(steps, arm.coarsest, rng, n_metrics=n_metrics, collapse_at=collapse,
                              val_sets=spec.data.val, test_freq=max(1, steps // 20),
                              bypass=spec.algorithm.startswith("pg_"))
        write_run(root, PAPER, spec.name, arm.label, 1 + k // len(arms), [records], algorithm=spec.algorithm)
        lines += len(records)
    for dtype, kl in (("bf16", 1e-3), ("fp16", 4e-5)):
        write_mismatch_result(root / MISMATCH_DIR, "DeepSeek-R1-Distill-Qwen-1.5B", dtype, dtype, rng,
                              n_sequences=128, max_len=4000, scale=PAPER, per_token_kl=kl)
    return n_runs, lines


def run_benchmark(values: int, steps: int, n_metrics: int, keep: Path | None = None) -> int:
    """Write ``values`` synthetic metric values, time load + every figure and print the timings; return 0."""
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
        base = keep or Path(tmp)
        root = base / "runs"
        started = time.perf_counter()
        n_runs, lines = write_synthetic_set(root, values, steps, n_metrics)
        print(f"synthetic set: {n_runs} runs x {steps} steps x ~{n_metrics} metrics = {lines:,} jsonl lines "
              f"in {root} (written in {time.perf_counter() - started:.1f} s, not timed)", file=sys.stderr)
        t0 = time.perf_counter()
        table = load_runs([root], progress=False)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        save_table(table, base / "results")
        t_save = time.perf_counter() - t0
        t0 = time.perf_counter()
        written = draw_all(FigureData(table, root / MISMATCH_DIR), base / "paper_figures", SCALES)
        t_fig = time.perf_counter() - t0
    total = t_load + t_fig
    print(f"values in the tidy table:        {len(table.metrics):,}")
    print(f"load (jsonl -> tidy table):      {t_load:6.1f} s")
    print(f"save (parquet + csv + runs.csv): {t_save:6.1f} s")
    print(f"figures ({len(written)} = {len(FIGURES)} x {len(SCALES)} scales, PNG + PDF): {t_fig:6.1f} s")
    print(f"load + all figures:              {total:6.1f} s  (goal <= {GOAL_S:.0f} s: "
          f"{'met' if total <= GOAL_S else 'NOT met'})")
    return 0
