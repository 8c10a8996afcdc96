"""Draw every figure at both scales into paper_figures/<scale>/ (PNG + PDF), from local files only."""

from precision_rl.analysis_cli import figures_main, run_main

if __name__ == "__main__":
    run_main(figures_main)
