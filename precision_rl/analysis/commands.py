"""The analysis subcommands of ``python -m precision_rl``: collect, figure, figures, tables, check, span,
bench-analysis.

``add_parsers`` registers them on the command line's subparsers; each ``cmd_*(args)`` returns an exit code.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from precision_rl.config.profiles import CALIBRATED, PROFILES
from precision_rl.config.scale import PAPER, SCALE_CHOICES, SCALES
from precision_rl.errors import UserError
from precision_rl.paths import (
    CALIBRATION_DIR,
    FIGURES_DIR,
    RESULTS_DIR,
    AnalysisView,
    local_view,
    logs_root,
    mismatch_root,
    mismatch_roots,
    published_view,
    reference_root,
    runs_root,
)


def _view(args) -> AnalysisView:
    """Return the view ``args`` select: the published logs with --published, else the local runs."""
    return published_view() if getattr(args, "published", False) else local_view()


def _results_dir(args) -> Path:
    """Return the folder of the collected table and the tables: --results, else the view's."""
    return Path(args.results) if args.results is not None else _view(args).results


def _table(args):
    """Return the table from --runs paths, else the collected one, else the view's runs read directly.

    A view without any run is a UserError that says where the other view's outputs are.
    """
    from precision_rl.analysis import logs

    if args.runs:
        return logs.load_runs([Path(p) for p in args.runs])
    results, view = _results_dir(args), _view(args)
    stale = (logs.stale_table_reason(results, view.runs)
             if args.results is None and view.name == "local" and (results / logs.METRICS_FILE).is_file() else None)
    if stale:
        print(f"note: the table in {results} is stale ({stale}); reading {view.runs} directly "
              "(`make collect` refreshes it)", file=sys.stderr)
        table = logs.load_runs([view.runs])
    elif (results / logs.METRICS_FILE).is_file():
        table = logs.read_table(results)
    elif view.runs.is_dir() and logs.find_run_dirs(view.runs):
        print(f"note: no collected table in {results}; reading {view.runs} directly", file=sys.stderr)
        table = logs.load_runs([view.runs])
    else:
        table = None
    if table is None or table.runs.empty:
        hint = ("the committed results are in results/ and paper_figures/ (`make published-results` redraws them, "
                "`make check-published` judges them)" if view.name == "local"
                else "publish finished runs with `make publish EXP=...`")
        raise UserError(f"no runs under {view.runs} ({view.name} runs): {hint}")
    return table


def _refuse_committed(args, *targets: Path | None) -> None:
    """Raise a UserError when the local view would write into the committed results/ or paper_figures/."""
    if getattr(args, "published", False):
        return
    for target in targets:
        if target is None:
            continue
        resolved = Path(target).resolve()
        if any(resolved.is_relative_to(root) for root in (RESULTS_DIR, FIGURES_DIR)):
            raise UserError(f"{target} holds committed results, written from the published logs only: local runs "
                            "write under runs/_analysis/ (add --published to redraw from results/logs)")


def _mismatch_dirs(args) -> list[Path]:
    """Return the offline mismatch folders: --mismatch, else the view's."""
    return list(args.mismatch) if args.mismatch else [_view(args).mismatch]


def _figure_data(args):
    """Return the FigureData of ``args``: the run table and the offline mismatch folders."""
    from precision_rl.analysis.figures import FigureData

    return FigureData(_table(args), _mismatch_dirs(args), profile=args.profile)


def _add_view(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--published", action="store_true",
                        help="the published logs (results/logs) and the committed outputs (results/, paper_figures/) "
                             "instead of the local runs (runs/) and their outputs (runs/_analysis/)")


def _add_source(parser: argparse.ArgumentParser, mismatch: bool = False) -> None:
    _add_view(parser)
    parser.add_argument("--results", type=Path,
                        help="folder holding the collected metrics.parquet (default: runs/_analysis, with "
                             "--published results/)")
    parser.add_argument("--runs", nargs="+", metavar="PATH",
                        help="read these run directories / wandb CSVs instead of the collected table")
    if mismatch:
        parser.add_argument("--mismatch", type=Path, nargs="+",
                            help="offline mismatch result folders, the first drawn where two hold the same result "
                                 "(default: runs/mismatch, with --published results/logs/mismatch)")


def _add_profile(parser: argparse.ArgumentParser, default: str | None) -> None:
    what = ("draw the tiny runs of this profile (default: %(default)s)" if default else
            "only the tiny runs of this profile (default: every profile)")
    parser.add_argument("--profile", default=default, choices=PROFILES, help=what)


def cmd_collect(args) -> int:
    """Read runs (and wandb CSVs) and save the tidy table; return 0."""
    from precision_rl.analysis import logs

    started = time.perf_counter()
    sources = list(args.paths)
    if args.root is not None or not sources:
        sources[:0] = logs.run_dirs_under(args.root or _view(args).runs)
    options = {k: getattr(args, k) for k in ("experiment", "precision", "seed") if getattr(args, k) is not None}
    out = args.out or _view(args).results
    _refuse_committed(args, out)
    table = logs.load_runs(sources, wandb_scale=args.wandb_scale, **options) if sources else logs.build_table([])
    written = logs.save_table(table, out, csv_too=not args.no_csv)
    print(f"{len(table.runs)} runs, {len(table.metrics):,} values -> {', '.join(map(str, written))} "
          f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def cmd_figure(args) -> int:
    """Draw one figure at one scale; return 0."""
    from precision_rl.analysis.figures import draw_figure, figure_path

    out = args.out or figure_path(_view(args).figures, args.scale, args.figure)
    _refuse_committed(args, out)
    png, pdf = draw_figure(_figure_data(args), args.figure, args.scale, out)
    print(f"wrote {png} and {pdf}", file=sys.stderr)
    return 0


def cmd_figures(args) -> int:
    """Draw every figure (or those of --only) at every scale, with a progress bar; return 0."""
    from precision_rl.analysis.figures import draw_all

    started = time.perf_counter()
    out = args.out or _view(args).figures
    _refuse_committed(args, out)
    written = draw_all(_figure_data(args), out, args.scale, args.only)
    print(f"{len(written)} figures (PNG + PDF) in {out} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


def cmd_tables(args) -> int:
    """Write results/summary.{csv,md}, results/paper_comparison.{csv,md}, results/inference_precision.{csv,md} (Table
    2), results/precision_pairs.{csv,md}, results/grid_progress.{csv,md}, results/mismatch_width.{csv,md} and
    results/mismatch_formats.{csv,md} (from the --mismatch folders), print the first two Markdown tables, rewrite the
    results, grid and ladder-formats blocks of --readme when given; return 0."""
    from precision_rl.analysis import (
        inference_table,
        mismatch_formats,
        mismatch_scaling,
        pairs,
        paper_compare,
        progress,
    )
    from precision_rl.analysis.readme_blocks import README_SCALE, update_readme
    from precision_rl.analysis.tables import summarize, to_markdown, write_summary

    _refuse_committed(args, args.out or _results_dir(args), args.readme)
    table = _table(args)
    summary = summarize(table)
    comparison = paper_compare.compare_summary(summary)
    paired = pairs.pair_runs(summary)
    grid = progress.grid_progress(summary)
    out = args.out or _results_dir(args)
    written = [*write_summary(summary, out), *paper_compare.write_comparison(comparison, out),
               *inference_table.write_inference_table(inference_table.inference_table(table), out),
               *pairs.write_pairs(paired, out), *progress.write_progress(grid, out),
               *mismatch_scaling.write_width(mismatch_scaling.width_table(_mismatch_dirs(args)), out)]
    formats = mismatch_formats.formats_table(_mismatch_dirs(args))
    written += mismatch_formats.write_formats(formats, out)
    blocks = [(pairs.README_BLOCK, pairs.scale_section(paired, README_SCALE)),
              (progress.README_BLOCK, progress.scale_section(grid, README_SCALE)),
              (mismatch_formats.README_BLOCK, mismatch_formats.formats_markdown_table(formats))]
    if args.readme and update_readme(args.readme, blocks):
        written.append(args.readme)
    print(to_markdown(summary))
    print(paper_compare.to_markdown(comparison))
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


def cmd_check(args) -> int:
    """Apply the pass criteria; return 0 when nothing fails, 1 otherwise."""
    from precision_rl.analysis.checks import failures, format_results, run_checks
    from precision_rl.analysis.closing import committed_runs

    results = run_checks(_table(args), args.run or None, args.scale, reference=committed_runs(),
                         profile=args.profile)
    print(format_results(results))
    failed = failures(results)
    for r in failed:
        value = "n/a" if r.value is None else f"{r.value:.4g}"
        print(f"FAILED {r.rule}: {r.run} ({r.scale}) value {value} {r.bound} - {r.note}", file=sys.stderr)
    n_runs = len({(r.scale, r.run) for r in results})
    print(f"{n_runs} {_view(args).name} runs, {len(results)} checks: {len(failed)} failed, "
          f"{sum(r.status == 'skip' for r in results)} skipped", file=sys.stderr)
    return 1 if failed else 0


def cmd_span(args) -> int:
    """Print the statistics of the selected runs over a range of steps; return 0."""
    from precision_rl.analysis.checks import select_runs
    from precision_rl.analysis.spans import parse_range, span_table

    steps = parse_range(args.steps)
    table = _table(args)
    chosen = select_runs(table.runs, args.run or None, args.scale, args.profile)
    print(span_table(replace(table, runs=chosen), steps, tuple(args.metric)))
    return 0


def cmd_publish(args) -> int:
    """Copy the logs of the finished runs matching ``args.run`` into results/logs/ (with --calibration: of every
    matching run into results/calibration/); return 0."""
    from fnmatch import fnmatchcase

    from precision_rl.analysis.logs import find_run_dirs
    from precision_rl.analysis.publish import (
        publish_calibration_runs,
        publish_problem,
        publish_runs,
        retire_superseded,
    )
    from precision_rl.errors import UserError
    from precision_rl.launch import runs

    if args.calibration and args.retire:
        raise UserError("--retire does not apply to --calibration: calibration runs of every configuration are kept")
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
        if args.profile and runs.profile_name(manifest) != args.profile:
            continue
        if not args.calibration and (problem := publish_problem(manifest, registered_only=not args.reference)):
            print(f"skipped ({problem}): {run_dir}", file=sys.stderr)
        else:
            chosen.append(run_dir)
    if not chosen:
        what = "run" if args.calibration else "finished run"
        raise UserError(f"no {what} under {root} matches {' '.join(args.run) or 'anything'}"
                        + (f" in the {args.profile} profile" if args.profile else ""))
    if args.calibration:
        for target in publish_calibration_runs(chosen, args.out or CALIBRATION_DIR):
            print(target)
        return 0
    out = args.out or (reference_root() if args.reference else logs_root())
    if args.retire:
        for path, key in retire_superseded(chosen, out):
            print(f"retired (configuration {key}, superseded): {path}", file=sys.stderr)
    for target in publish_runs(chosen, out, registered_only=not args.reference):
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
    _add_view(collect)
    collect.add_argument("--root", type=Path, help="the folder of runs to read when no paths are given "
                         "(default: $PRECISION_RL_RUNS or runs/, with --published results/logs/)")
    collect.add_argument("--out", type=Path, help="output folder (default: runs/_analysis, with --published results/)")
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
    _add_profile(figure, CALIBRATED)
    figure.add_argument("--out", type=Path, help="PNG path (default: runs/_analysis/figures/<scale>/<figure>.png, "
                                                 "with --published paper_figures/<scale>/<figure>.png)")
    figure.set_defaults(func=cmd_figure)

    figures = sub.add_parser("figures", help="draw every figure at both scales into runs/_analysis/figures/<scale>/ "
                                             "(with --published: paper_figures/<scale>/)")
    _add_source(figures, mismatch=True)
    _add_profile(figures, CALIBRATED)
    figures.add_argument("--out", type=Path, help="output folder (default: runs/_analysis/figures, with --published "
                                                  "paper_figures/)")
    figures.add_argument("--scale", nargs="+", choices=SCALES, default=list(SCALES))
    figures.add_argument("--only", nargs="+", metavar="FIGURE", help="draw only these figures (names as under analysis/)")
    figures.set_defaults(func=cmd_figures)

    tables = sub.add_parser("tables", help="write the per-run results table (summary.csv and summary.md), the "
                                           "table beside the paper's values (paper_comparison.csv and .md) and FP16 "
                                           "beside BF16 seed by seed (precision_pairs.csv and .md), Table 2 beside "
                                           "the paper's (inference_precision.csv and .md), the grid's "
                                           "progress (grid_progress.csv and .md), the width study "
                                           "(mismatch_width.csv and .md) and the ladder's real rungs offline "
                                           "(mismatch_formats.csv and .md)")
    _add_source(tables, mismatch=True)
    tables.add_argument("--out", type=Path, help="output folder (default: the --results folder)")
    tables.add_argument("--readme", type=Path, help="also rewrite this README's results block (the tiny-scale pairs) "
                                                    "and grid block (the runs planned and finished)")
    tables.set_defaults(func=cmd_tables)

    check = sub.add_parser("check", help="apply the paper's pass criteria to runs (the local ones, with --published "
                                         "the published ones), each placed in the committed band of its "
                                         "configuration; exit 1 on any failure")
    check.add_argument("run", nargs="*", help="run names, experiment names, globs or run directories (default: all)")
    check.add_argument("--scale", default="auto", choices=SCALE_CHOICES, help="only runs at this scale (auto: all)")
    _add_source(check)
    _add_profile(check, None)
    check.set_defaults(func=cmd_check)

    span = sub.add_parser("span", help="print runs' statistics over a range of steps: the training reward (per-step "
                                       "mean and sd, trailing mean, first step it reaches the sanity pass mark), the "
                                       "last validation, and the medians of step time and phases, mismatch, entropy "
                                       "and response length")
    span.add_argument("run", nargs="*", help="run names, experiment names, globs or run directories (default: all)")
    span.add_argument("--steps", required=True, metavar="FIRST-LAST", help="the steps, both included, e.g. 76-225")
    span.add_argument("--scale", default="auto", choices=SCALE_CHOICES, help="only runs at this scale (auto: all)")
    span.add_argument("--metric", action="append", default=[], metavar="NAME",
                      help="also the mean (median) over the range of this logged metric, e.g. actor/grad_norm "
                           "(repeatable)")
    _add_source(span)
    _add_profile(span, None)
    span.set_defaults(func=cmd_span)

    publish = sub.add_parser("publish", help="copy finished runs' manifest and metrics into results/logs/ (committed)")
    publish.add_argument("run", nargs="*", help="run names or experiment names, globs allowed (default: every run)")
    publish.add_argument("--root", type=Path, help="the runs root (default: $PRECISION_RL_RUNS or runs/)")
    publish.add_argument("--out", type=Path, help="where to publish (default: $PRECISION_RL_LOGS or results/logs/)")
    kind = publish.add_mutually_exclusive_group()
    kind.add_argument("--reference", action="store_true",
                      help="publish as a reference run into results/reference/ (default --out): runs with extra "
                           "overrides are allowed there, e.g. the slow tier's 2-step regression gate; figures "
                           "never read them")
    kind.add_argument("--calibration", action="store_true",
                      help="publish as a calibration run into results/calibration/ (default --out): any status, any "
                           "overrides; results/calibration/NOTES.md describes them, nothing else reads them")
    publish.add_argument("--retire", action="store_true",
                         help="first remove the published runs of the same experiments from another configuration "
                              "(an older profile; git history keeps them)")
    _add_profile(publish, None)
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
