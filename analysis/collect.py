"""Collect the local runs' logs (and wandb CSV exports) into runs/_analysis/metrics.{parquet,csv} and runs.csv (with --published: results/logs into results/). Same as `python -m precision_rl collect`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["collect"] + sys.argv[1:]))
