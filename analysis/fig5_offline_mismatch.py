"""Fig. 5, offline mismatch: token scatter and sequence log-ratio vs length per dtype. Usage: python analysis/fig5_offline_mismatch.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("fig5_offline_mismatch", argv))
