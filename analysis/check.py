"""Apply the paper's pass criteria to runs; exit 1 naming each failed rule. Same as `python -m precision_rl check`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["check"] + sys.argv[1:]))
