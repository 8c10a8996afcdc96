"""Draw every figure at both scales into paper_figures/<scale>/ (PNG + PDF), from local files only. Same as `python -m precision_rl figures`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figures"] + sys.argv[1:]))
