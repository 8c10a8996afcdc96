"""Write the tables (summary, comparison with the paper, pairs, ...): the local runs' into runs/_analysis/, with --published the committed ones into results/. Same as `python -m precision_rl tables`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["tables"] + sys.argv[1:]))
