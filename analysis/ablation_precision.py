"""Precision ablation (train x infer dtype): reward and KL over steps, summary heat-maps. Same as `python -m precision_rl figure ablation_precision` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "ablation_precision"] + sys.argv[1:]))
