"""Collect every run's logs (and wandb CSV exports) into results/metrics.{parquet,csv} and results/runs.csv. Same as `python -m precision_rl collect`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["collect"] + sys.argv[1:]))
