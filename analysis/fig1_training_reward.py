"""Fig. 1, training reward grid (BF16 vs FP16 per registry panel fig1a-l). Usage: python analysis/fig1_training_reward.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("fig1_training_reward", argv))
