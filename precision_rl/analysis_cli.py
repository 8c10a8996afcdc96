"""Command-line entry points of the analysis scripts under analysis/ (collect, figures, tables, check).

Each ``*_main(argv)`` returns an exit code; ``run_main`` turns a UserError into one ``error: ...`` line and exit
2, and prints warnings as ``warning: ...`` lines.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from precision_rl import REPO_ROOT
from precision_rl.errors import UserError

DEFAULT_RESULTS = REPO_ROOT / "results"
DEFAULT_FIGURES = REPO_ROOT / "paper_figures"


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Run ``main`` and exit with its code; user errors print one line and exit 2."""
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {message}\n"
    try:
        code = main(argv)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


def _table(args):
    """Return the table from --runs paths, else the collected one, else the runs root read directly."""
    from precision_rl import logs
    from precision_rl.paths import runs_root

    if getattr(args, "runs", None):
        return logs.load_runs([Path(p) for p in args.runs])
    if (Path(args.results) / logs.METRICS_FILE).is_file():
        return logs.read_table(args.results)
    print(f"note: no collected table in {args.results}; reading {runs_root()} directly", file=sys.stderr)
    return logs.load_runs(None)


def _add_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help="folder holding the collected metrics.parquet (default: results/)")
    parser.add_argument("--runs", nargs="+", metavar="PATH",
                        help="read these run directories / wandb CSVs instead of the collected table")


def collect_main(argv: list[str] | None = None) -> int:
    """``analysis/collect.py``: read runs (and wandb CSVs) and save the tidy table; return 0."""
    from precision_rl import logs

    parser = argparse.ArgumentParser(description="Collect run logs into results/metrics.{parquet,csv} and runs.csv.")
    parser.add_argument("paths", nargs="*", type=Path,
                        help="run directories, folders of runs, or wandb CSV exports (default: the runs root)")
    parser.add_argument("--root", type=Path, help="the runs root to read when no paths are given "
                        "(default: $PRECISION_RL_RUNS or runs/; absent means no runs)")
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS, help="output folder (default: results/)")
    parser.add_argument("--wandb-scale", default="paper", choices=("paper", "tiny"),
                        help="scale of runs read from wandb CSVs (default: paper)")
    parser.add_argument("--experiment", help="experiment of a wandb run not named <experiment>-<precision>-s<seed>")
    parser.add_argument("--precision", help="precision arm of such a wandb run (fp16, bf16, train_bf16-infer_fp32)")
    parser.add_argument("--seed", type=int, help="seed of such a wandb run")
    parser.add_argument("--no-csv", action="store_true", help="write only the parquet table (faster)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    from precision_rl.paths import runs_root

    sources = list(args.paths)
    if args.root is not None or not sources:
        root = args.root or runs_root()
        if root.is_dir() and logs.find_run_dirs(root):
            sources.insert(0, root)
    options = {k: getattr(args, k) for k in ("experiment", "precision", "seed") if getattr(args, k) is not None}
    table = logs.load_runs(sources, wandb_scale=args.wandb_scale, **options) if sources else logs.build_table([])
    written = logs.save_table(table, args.out, csv_too=not args.no_csv)
    print(f"{len(table.runs)} runs, {len(table.metrics):,} values -> {', '.join(map(str, written))} "
          f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def figure_main(name: str, argv: list[str] | None = None) -> int:
    """``analysis/<figure>.py``: draw one figure at one scale; return 0."""
    from precision_rl.figures import FIGURE_TITLES, SCALES, FigureData, default_mismatch_root, draw_figure, figure_path

    parser = argparse.ArgumentParser(description=f"Draw {FIGURE_TITLES[name]} (PNG and PDF).")
    parser.add_argument("--scale", required=True, choices=SCALES)
    _add_source(parser)
    parser.add_argument("--mismatch", type=Path, help="offline mismatch results (default: <runs root>/mismatch)")
    parser.add_argument("--out", type=Path, help="PNG path (default: paper_figures/<scale>/<figure>.png)")
    args = parser.parse_args(argv)
    data = FigureData(_table(args), args.mismatch or default_mismatch_root())
    png, pdf = draw_figure(data, name, args.scale, args.out or figure_path(DEFAULT_FIGURES, args.scale, name))
    print(f"wrote {png} and {pdf}", file=sys.stderr)
    return 0


def figures_main(argv: list[str] | None = None) -> int:
    """``analysis/figures.py``: draw every figure at every scale (progress bar); return 0."""
    from precision_rl.figures import FIGURES, SCALES, FigureData, default_mismatch_root, draw_all

    parser = argparse.ArgumentParser(description="Draw every figure at both scales into paper_figures/<scale>/.")
    _add_source(parser)
    parser.add_argument("--mismatch", type=Path, help="offline mismatch results (default: <runs root>/mismatch)")
    parser.add_argument("--out", type=Path, default=DEFAULT_FIGURES, help="output folder (default: paper_figures/)")
    parser.add_argument("--scale", nargs="+", choices=SCALES, default=list(SCALES))
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), help="draw only these figures")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    data = FigureData(_table(args), args.mismatch or default_mismatch_root())
    written = draw_all(data, args.out, args.scale, args.only)
    print(f"{len(written)} figures (PNG + PDF) in {args.out} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def tables_main(argv: list[str] | None = None) -> int:
    """``analysis/tables.py``: write results/summary.{csv,md} and print the Markdown; return 0."""
    from precision_rl.tables import summarize, to_markdown, write_summary

    parser = argparse.ArgumentParser(description="Write the per-run results table (summary.csv and summary.md).")
    _add_source(parser)
    parser.add_argument("--out", type=Path, help="output folder (default: the --results folder)")
    args = parser.parse_args(argv)
    summary = summarize(_table(args))
    csv_path, md_path = write_summary(summary, args.out or args.results)
    print(to_markdown(summary))
    print(f"wrote {csv_path} and {md_path}", file=sys.stderr)
    return 0


def check_main(argv: list[str] | None = None) -> int:
    """``analysis/check.py``: apply the pass criteria; return 0 when nothing fails, 1 otherwise."""
    from precision_rl.checks import failures, format_results, run_checks

    parser = argparse.ArgumentParser(description="Apply the paper's pass criteria to runs; exit 1 on any failure.")
    parser.add_argument("run", nargs="*", help="run names, experiment names, globs or run directories (default: all)")
    parser.add_argument("--scale", default="auto", choices=("auto", "paper", "tiny"),
                        help="only runs at this scale (auto: all)")
    _add_source(parser)
    args = parser.parse_args(argv)
    results = run_checks(_table(args), args.run or None, args.scale)
    print(format_results(results))
    failed = failures(results)
    for r in failed:
        value = "n/a" if r.value is None else f"{r.value:.4g}"
        print(f"FAILED {r.rule}: {r.run} ({r.scale}) value {value} {r.bound} - {r.note}", file=sys.stderr)
    n_runs = len({(r.scale, r.run) for r in results})
    print(f"{n_runs} runs, {len(results)} checks: {len(failed)} failed, "
          f"{sum(r.status == 'skip' for r in results)} skipped", file=sys.stderr)
    return 1 if failed else 0
