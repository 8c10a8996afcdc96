"""Fig. 2, evaluation accuracy grid (first validation set per panel fig2a-l). Same as `python -m precision_rl figure fig2_eval_accuracy` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "fig2_eval_accuracy"] + sys.argv[1:]))
