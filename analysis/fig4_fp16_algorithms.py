"""Fig. 4, FP16 algorithm comparison: reward, response length, two validation sets. Same as `python -m precision_rl figure fig4_fp16_algorithms` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "fig4_fp16_algorithms"] + sys.argv[1:]))
