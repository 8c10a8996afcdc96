"""The analysis subcommands of ``python -m precision_rl``: collect, figure, figures, tables, check, bench-analysis.

``add_parsers`` registers them on the command line's subparsers; each ``cmd_*(args)`` returns an exit code.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from precision_rl.config.scale import PAPER, SCALE_CHOICES, SCALES
from precision_rl.paths import (
    FIGURES_DIR,
    RESULTS_DIR,
    logs_root,
    mismatch_root,
    mismatch_roots,
    reference_root,
    runs_root,
)


def _table(args):
    """Return the table from --runs paths, else the collected one, else the runs root read directly."""
    from precision_rl.analysis import logs

    if args.runs:
        return logs.load_runs([Path(p) for p in args.runs])
    if (Path(args.results) / logs.METRICS_FILE).is_file():
        return logs.read_table(args.results)
    print(f"note: no collected table in {args.results}; reading {runs_root()} and {logs_root()} directly", file=sys.stderr)
    return logs.load_runs(None)


def _figure_data(args):
    """Return the FigureData of ``args``: the run table and the offline mismatch folders."""
    from precision_rl.analysis.figures import FigureData

    return FigureData(_table(args), args.mismatch or mismatch_roots())


def _add_source(parser: argparse.ArgumentParser, mismatch: bool = False) -> None:
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help="folder holding the collected metrics.parquet (default: results/)")
    parser.add_argument("--runs", nargs="+", metavar="PATH",
                        help="read these run directories / wandb CSVs instead of the collected table")
    if mismatch:
        parser.add_argument("--mismatch", type=Path, nargs="+",
                            help="offline mismatch result folders, the first drawn where two hold the same result "
                                 "(default: <runs root>/mismatch and the published results/logs/mismatch)")


def cmd_collect(args) -> int:
    """Read runs (and wandb CSVs) and save the tidy table; return 0."""
    from precision_rl.analysis import logs

    started = time.perf_counter()
    sources = list(args.paths)
    if args.root is not None or not sources:
        sources[:0] = logs.run_dirs_under(args.root or runs_root())
    options = {k: getattr(args, k) for k in ("experiment", "precision", "seed") if getattr(args, k) is not None}
    table = logs.load_runs(sources, wandb_scale=args.wandb_scale, **options) if sources else logs.build_table([])
    written = logs.save_table(table, args.out, csv_too=not args.no_csv)
    print(f"{len(table.runs)} runs, {len(table.metrics):,} values -> {', '.join(map(str, written))} "
          f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def cmd_figure(args) -> int:
    """Draw one figure at one scale; return 0."""
    from precision_rl.analysis.figures import draw_figure, figure_path

    out = args.out or figure_path(FIGURES_DIR, args.scale, args.figure)
    png, pdf = draw_figure(_figure_data(args), args.figure, args.scale, out)
    print(f"wrote {png} and {pdf}", file=sys.stderr)
    return 0


def cmd_figures(args) -> int:
    """Draw every figure (or those of --only) at every scale, with a progress bar; return 0."""
    from precision_rl.analysis.figures import draw_all

    started = time.perf_counter()
    written = draw_all(_figure_data(args), args.out, args.scale, args.only)
    print(f"{len(written)} figures (PNG + PDF) in {args.out} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def cmd_tables(args) -> int:
    """Write results/summary.{csv,md}, results/paper_comparison.{csv,md}, results/inference_precision.{csv,md} (Table
    2), results/precision_pairs.{csv,md}, results/grid_progress.{csv,md} and results/mismatch_width.{csv,md} (from the
    --mismatch folders), print the first two Markdown tables, rewrite the results and grid blocks of --readme when
    given; return 0."""
    from precision_rl.analysis import inference_table, mismatch_scaling, pairs, paper_compare, progress
    from precision_rl.analysis.readme_blocks import README_SCALE, update_readme
    from precision_rl.analysis.tables import summarize, to_markdown, write_summary

    table = _table(args)
    summary = summarize(table)
    comparison = paper_compare.compare_summary(summary)
    paired = pairs.pair_runs(summary)
    grid = progress.grid_progress(summary)
    out = args.out or args.results
    written = [*write_summary(summary, out), *paper_compare.write_comparison(comparison, out),
               *inference_table.write_inference_table(inference_table.inference_table(table), out),
               *pairs.write_pairs(paired, out), *progress.write_progress(grid, out),
               *mismatch_scaling.write_width(mismatch_scaling.width_table(args.mismatch or mismatch_roots()), out)]
    blocks = [(pairs.README_BLOCK, pairs.scale_section(paired, README_SCALE)),
              (progress.README_BLOCK, progress.scale_section(grid, README_SCALE))]
    if args.readme and update_readme(args.readme, blocks):
        written.append(args.readme)
    print(to_markdown(summary))
    print(paper_compare.to_markdown(comparison))
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


def _reference():
    """Return the table of the committed reference runs, or None where there are none."""
    from precision_rl.analysis import logs
    from precision_rl.launch import runs

    root = reference_root()
    if not root.is_dir() or not any(root.rglob(runs.MANIFEST)):
        return None
    return logs.load_runs([root], progress=False)


def cmd_check(args) -> int:
    """Apply the pass criteria; return 0 when nothing fails, 1 otherwise."""
    from precision_rl.analysis.checks import failures, format_results, run_checks

    results = run_checks(_table(args), args.run or None, args.scale, reference=_reference())
    print(format_results(results))
    failed = failures(results)
    for r in failed:
        value = "n/a" if r.value is None else f"{r.value:.4g}"
        print(f"FAILED {r.rule}: {r.run} ({r.scale}) value {value} {r.bound} - {r.note}", file=sys.stderr)
    n_runs = len({(r.scale, r.run) for r in results})
    print(f"{n_runs} runs, {len(results)} checks: {len(failed)} failed, "
          f"{sum(r.status == 'skip' for r in results)} skipped", file=sys.stderr)
    return 1 if failed else 0


def cmd_publish(args) -> int:
    """Copy the logs of the finished runs matching ``args.run`` into results/logs/; return 0."""
    from fnmatch import fnmatchcase

    from precision_rl.analysis.logs import find_run_dirs, publish_problem, publish_runs
    from precision_rl.errors import UserError
    from precision_rl.launch import runs

    root = args.root or runs_root()
    chosen = []
    for run_dir in find_run_dirs(root) if root.is_dir() else []:
        try:
            manifest = runs.read_manifest(run_dir)
            names = (str(manifest["run_name"]), str(manifest["experiment"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{run_dir / runs.MANIFEST}: not a run manifest ({exc})") from None
        if args.run and not any(fnmatchcase(name, p) for name in names for p in args.run):
            continue
        if problem := publish_problem(manifest):
            print(f"skipped ({problem}): {run_dir}", file=sys.stderr)
        else:
            chosen.append(run_dir)
    if not chosen:
        raise UserError(f"no finished run under {root} matches {' '.join(args.run) or 'anything'}")
    for target in publish_runs(chosen, args.out or logs_root()):
        print(target)
    return 0


def cmd_publish_mismatch(args) -> int:
    """Copy offline mismatch results (the self pairs, tables as CSV) into results/logs/mismatch/; return 0."""
    from precision_rl.analysis.mismatch_results import publish_mismatch

    for target in publish_mismatch(args.root or mismatch_root(), args.out or mismatch_roots()[1], args.model):
        print(target)
    return 0


def cmd_bench_analysis(args) -> int:
    """Time the analysis path on a synthetic set; return 0."""
    from precision_rl.analysis.bench import run_benchmark

    return run_benchmark(args.values, args.steps, args.metrics, args.keep)


def add_parsers(sub) -> None:
    """Register the analysis subcommands on ``sub`` (the command line's subparsers)."""
    collect = sub.add_parser("collect", help="collect run logs into results/metrics.{parquet,csv} and runs.csv")
    collect.add_argument("paths", nargs="*", type=Path,
                         help="run directories, folders of runs, or wandb CSV exports (default: the runs root)")
    collect.add_argument("--root", type=Path, help="the runs root to read when no paths are given "
                         "(default: $PRECISION_RL_RUNS or runs/, and the published logs in results/logs/)")
    collect.add_argument("--out", type=Path, default=RESULTS_DIR, help="output folder (default: results/)")
    collect.add_argument("--wandb-scale", default=PAPER, choices=SCALES,
                         help="scale of runs read from wandb CSVs (default: paper)")
    collect.add_argument("--experiment", help="experiment of a wandb run not named <experiment>-<precision>-s<seed>")
    collect.add_argument("--precision", help="precision arm of such a wandb run (fp16, bf16, train_bf16-infer_fp32)")
    collect.add_argument("--seed", type=int, help="seed of such a wandb run")
    collect.add_argument("--no-csv", action="store_true", help="write only the parquet table (faster)")
    collect.set_defaults(func=cmd_collect)

    figure = sub.add_parser("figure", help="draw one figure at one scale (PNG and PDF)")
    figure.add_argument("figure", help="the figure's name, as its script under analysis/ (e.g. fig1_training_reward)")
    figure.add_argument("--scale", required=True, choices=SCALES)
    _add_source(figure, mismatch=True)
    figure.add_argument("--out", type=Path, help="PNG path (default: paper_figures/<scale>/<figure>.png)")
    figure.set_defaults(func=cmd_figure)

    figures = sub.add_parser("figures", help="draw every figure at both scales into paper_figures/<scale>/")
    _add_source(figures, mismatch=True)
    figures.add_argument("--out", type=Path, default=FIGURES_DIR, help="output folder (default: paper_figures/)")
    figures.add_argument("--scale", nargs="+", choices=SCALES, default=list(SCALES))
    figures.add_argument("--only", nargs="+", metavar="FIGURE", help="draw only these figures (names as under analysis/)")
    figures.set_defaults(func=cmd_figures)

    tables = sub.add_parser("tables", help="write the per-run results table (summary.csv and summary.md), the "
                                           "table beside the paper's values (paper_comparison.csv and .md) and FP16 "
                                           "beside BF16 seed by seed (precision_pairs.csv and .md), Table 2 beside "
                                           "the paper's (inference_precision.csv and .md), the grid's "
                                           "progress (grid_progress.csv and .md) and the width study "
                                           "(mismatch_width.csv and .md)")
    _add_source(tables, mismatch=True)
    tables.add_argument("--out", type=Path, help="output folder (default: the --results folder)")
    tables.add_argument("--readme", type=Path, help="also rewrite this README's results block (the tiny-scale pairs) "
                                                    "and grid block (the runs planned and finished)")
    tables.set_defaults(func=cmd_tables)

    check = sub.add_parser("check", help="apply the paper's pass criteria to runs; exit 1 on any failure")
    check.add_argument("run", nargs="*", help="run names, experiment names, globs or run directories (default: all)")
    check.add_argument("--scale", default="auto", choices=SCALE_CHOICES, help="only runs at this scale (auto: all)")
    _add_source(check)
    check.set_defaults(func=cmd_check)

    publish = sub.add_parser("publish", help="copy finished runs' manifest and metrics into results/logs/ (committed)")
    publish.add_argument("run", nargs="*", help="run names or experiment names, globs allowed (default: every run)")
    publish.add_argument("--root", type=Path, help="the runs root (default: $PRECISION_RL_RUNS or runs/)")
    publish.add_argument("--out", type=Path, help="where to publish (default: $PRECISION_RL_LOGS or results/logs/)")
    publish.set_defaults(func=cmd_publish)
    publish_mm = sub.add_parser("publish-mismatch", help="copy offline mismatch results into results/logs/mismatch/ "
                                                         "(committed; self pairs, tables as CSV)")
    publish_mm.add_argument("model", nargs="*", help="model folder names under the mismatch root (default: all)")
    publish_mm.add_argument("--root", type=Path, help="the mismatch results (default: <runs root>/mismatch)")
    publish_mm.add_argument("--out", type=Path, help="where to publish (default: <published logs>/mismatch)")
    publish_mm.set_defaults(func=cmd_publish_mismatch)

    bench = sub.add_parser("bench-analysis", help="time synthetic metric values -> tidy table -> every figure")
    bench.add_argument("--values", type=int, default=1_000_000, help="metric values to generate (default 1e6)")
    bench.add_argument("--steps", type=int, default=500, help="steps per run (default 500)")
    bench.add_argument("--metrics", type=int, default=40, help="metrics per step (default 40)")
    bench.add_argument("--keep", type=Path, help="write the synthetic set and outputs here instead of a temp dir")
    bench.set_defaults(func=cmd_bench_analysis)
