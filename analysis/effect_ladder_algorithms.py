"""Effect study (beyond the paper): the paper's Fig. 1 algorithms at the mismatch ladder's degrading rollout. Same as `python -m precision_rl figure effect_ladder_algorithms` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "effect_ladder_algorithms"] + sys.argv[1:]))
