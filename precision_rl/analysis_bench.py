"""Benchmark of the analysis path (``make bench-analysis``): a synthetic set of 1,000,000 metric values (many
runs × steps × ~40 metrics, every registry arm at paper scale) → load into the tidy table → every figure.

Goal (issue 6): load + all figures ≤ 30 s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from precision_rl.figures import FIGURES, SCALES, FigureData, draw_all
from precision_rl.logs import load_runs, save_table
from precision_rl.registry import load_all
from precision_rl.synthetic import run_records, write_mismatch_result, write_run

GOAL_S = 30.0


def write_synthetic_set(root: Path, values: int, steps: int, n_metrics: int, seed: int = 0) -> tuple[int, int]:
    """Write synthetic paper-scale runs under ``root`` until about ``values`` values; return (runs, jsonl lines)."""
    rng = np.random.default_rng(seed)
    arms = [(spec, arm) for spec in load_all("paper").values() for arm in spec.arms]
    per_run = steps * n_metrics
    n_runs = max(1, round(values / per_run))
    lines = 0
    for k in range(n_runs):
        spec, arm = arms[k % len(arms)]
        coarse = "bf16" if "bf16" in (arm.train, arm.infer) else ("fp16" if "fp16" in (arm.train, arm.infer) else "fp32")
        collapse = steps // 2 if coarse == "bf16" and spec.algorithm in ("grpo", "gspo") else None
        records = run_records(steps, coarse, rng, n_metrics=n_metrics, collapse_at=collapse,
                              val_sets=spec.data.val, test_freq=max(1, steps // 20),
                              bypass=spec.algorithm.startswith("pg_"))
        write_run(root, "paper", spec.name, arm.label, 1 + k // len(arms), [records], algorithm=spec.algorithm)
        lines += len(records)
    for dtype, kl in (("bf16", 1e-3), ("fp16", 4e-5)):
        write_mismatch_result(root / "mismatch", "DeepSeek-R1-Distill-Qwen-1.5B", dtype, dtype, rng,
                              n_sequences=128, max_len=4000, scale="paper", per_token_kl=kl)
    return n_runs, lines


def bench_main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its timings; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=1_000_000, help="metric values to generate (default 1e6)")
    parser.add_argument("--steps", type=int, default=500, help="steps per run (default 500)")
    parser.add_argument("--metrics", type=int, default=40, help="metrics per step (default 40)")
    parser.add_argument("--keep", type=Path, help="write the synthetic set and outputs here instead of a temp dir")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
        base = args.keep or Path(tmp)
        root = base / "runs"
        started = time.perf_counter()
        n_runs, lines = write_synthetic_set(root, args.values, args.steps, args.metrics)
        print(f"synthetic set: {n_runs} runs x {args.steps} steps x ~{args.metrics} metrics = {lines:,} jsonl lines "
              f"in {root} (written in {time.perf_counter() - started:.1f} s, not timed)", file=sys.stderr)
        t0 = time.perf_counter()
        table = load_runs([root], progress=False)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        save_table(table, base / "results")
        t_save = time.perf_counter() - t0
        t0 = time.perf_counter()
        written = draw_all(FigureData(table, root / "mismatch"), base / "paper_figures", SCALES)
        t_fig = time.perf_counter() - t0
    total = t_load + t_fig
    print(f"values in the tidy table:        {len(table.metrics):,}")
    print(f"load (jsonl -> tidy table):      {t_load:6.1f} s")
    print(f"save (parquet + csv + runs.csv): {t_save:6.1f} s")
    print(f"figures ({len(written)} = {len(FIGURES)} x {len(SCALES)} scales, PNG + PDF): {t_fig:6.1f} s")
    print(f"load + all figures:              {total:6.1f} s  (goal <= {GOAL_S:.0f} s: "
          f"{'met' if total <= GOAL_S else 'NOT met'})")
    return 0
