"""Draw every figure at both scales (PNG + PDF): the local runs into runs/_analysis/figures/<scale>/, with --published the committed logs into paper_figures/<scale>/. Same as `python -m precision_rl figures`."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figures"] + sys.argv[1:]))
