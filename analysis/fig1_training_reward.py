"""Fig. 1, training reward grid (BF16 vs FP16 per registry panel fig1a-l). Same as `python -m precision_rl figure fig1_training_reward` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "fig1_training_reward"] + sys.argv[1:]))
