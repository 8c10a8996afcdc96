"""Fig. 4, FP16 algorithm comparison: reward, response length, two validation sets. Usage: python analysis/fig4_fp16_algorithms.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("fig4_fp16_algorithms", argv))
