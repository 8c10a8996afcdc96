"""Effect study (beyond the paper): mismatch against model width and response length. Same as `python -m precision_rl figure effect_mismatch_scaling` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "effect_mismatch_scaling"] + sys.argv[1:]))
