"""Benchmark: 1,000,000 synthetic metric values -> tidy table -> every figure (goal: load + figures <= 30 s)."""

from precision_rl.analysis_bench import bench_main
from precision_rl.analysis_cli import run_main

if __name__ == "__main__":
    run_main(bench_main)
