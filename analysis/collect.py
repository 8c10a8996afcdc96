"""Collect every run's logs (and wandb CSV exports) into results/metrics.{parquet,csv} and results/runs.csv."""

from precision_rl.analysis_cli import collect_main, run_main

if __name__ == "__main__":
    run_main(collect_main)
