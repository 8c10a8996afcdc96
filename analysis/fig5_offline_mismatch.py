"""Fig. 5, offline mismatch: token scatter and sequence log-ratio vs length per dtype. Same as `python -m precision_rl figure fig5_offline_mismatch` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "fig5_offline_mismatch"] + sys.argv[1:]))
