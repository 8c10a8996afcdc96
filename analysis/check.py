"""Apply the paper's pass criteria to runs; exit 1 naming each failed rule. Usage: python analysis/check.py [RUN ...]."""

from precision_rl.analysis_cli import check_main, run_main

if __name__ == "__main__":
    run_main(check_main)
