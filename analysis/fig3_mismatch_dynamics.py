"""Fig. 3, BF16 GRPO / Token-TIS / Seq-MIS / GSPO vs FP16 PG-Seq-IS: reward, accuracy, mismatch. Same as `python -m precision_rl figure fig3_mismatch_dynamics` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "fig3_mismatch_dynamics"] + sys.argv[1:]))
