"""FP16 vs BF16 with and without the fork's optimizer and loss changes: reward, validation accuracy and KL over steps. Usage: python analysis/ablation_fork_changes.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("ablation_fork_changes", argv))
