"""Effect study (beyond the paper): PG-Seq-IS's own mismatch ladder, where its uncapped sequence weight starts to fail. Same as `python -m precision_rl figure effect_ladder_pg_seq_is` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "effect_ladder_pg_seq_is"] + sys.argv[1:]))
