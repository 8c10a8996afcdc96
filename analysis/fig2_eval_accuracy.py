"""Fig. 2, evaluation accuracy grid (first validation set per panel fig2a-l). Usage: python analysis/fig2_eval_accuracy.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("fig2_eval_accuracy", argv))
