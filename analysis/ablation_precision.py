"""Precision ablation (train x infer dtype): reward and KL over steps, summary heat-maps. Usage: python analysis/ablation_precision.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("ablation_precision", argv))
