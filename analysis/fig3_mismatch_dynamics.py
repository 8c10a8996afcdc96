"""Fig. 3, BF16 GRPO / Token-TIS / Seq-MIS / GSPO vs FP16 PG-Seq-IS: reward, accuracy, mismatch. Usage: python analysis/fig3_mismatch_dynamics.py --scale tiny [--out PNG]."""

from precision_rl.analysis_cli import figure_main, run_main

if __name__ == "__main__":
    run_main(lambda argv: figure_main("fig3_mismatch_dynamics", argv))
