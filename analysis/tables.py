"""Write results/summary.{csv,md}: one row per run (peak/final reward, collapse, accuracy, mismatch, wall time)."""

from precision_rl.analysis_cli import run_main, tables_main

if __name__ == "__main__":
    run_main(tables_main)
