"""Write results/summary.{csv,md}: one row per run (peak/final reward, collapse, accuracy, mismatch, wall time). Same as `python -m precision_rl tables`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["tables"] + sys.argv[1:]))
