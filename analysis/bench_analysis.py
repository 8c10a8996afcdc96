"""Benchmark: 1,000,000 synthetic metric values -> tidy table -> every figure (goal: load + figures <= 30 s). Same as `python -m precision_rl bench-analysis`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench-analysis"] + sys.argv[1:]))
