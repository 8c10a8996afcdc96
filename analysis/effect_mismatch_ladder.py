"""Effect study (beyond the paper): the mismatch ladder's dose-response. Same as `python -m precision_rl figure effect_mismatch_ladder` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "effect_mismatch_ladder"] + sys.argv[1:]))
