"""FP16 vs BF16 with and without the fork's optimizer and loss changes: reward, validation accuracy and KL over steps. Same as `python -m precision_rl figure ablation_fork_changes` with --scale tiny [--out PNG]."""

import sys

from precision_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["figure", "ablation_fork_changes"] + sys.argv[1:]))
