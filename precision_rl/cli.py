"""The one command line: ``python -m precision_rl <command>``; every user error is one line and exit 2.

``--help`` lists every command from the parsers themselves (the analysis commands are ``analysis/commands.py``'s).
The Makefile and the scripts under ``analysis/`` call these; the few tools with a main of their own are ``TOOLS``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace

import yaml

from precision_rl.analysis import commands as analysis_commands
from precision_rl.config import registry
from precision_rl.config.precision import PrecisionArm, parse_arm
from precision_rl.config.profiles import (
    DEFAULT_PROFILE,
    PAPER_PROFILES,
    PROFILES,
    SMOKE,
    check_profile,
    profile_for,
    registry_profile,
)
from precision_rl.config.registry import ExperimentSpec
from precision_rl.config.scale import PAPER, SCALE_CHOICES, ScaleDecision, resolve_scale
from precision_rl.console import render_table
from precision_rl.data import command as data_command
from precision_rl.errors import UserError
from precision_rl.launch.fields import FIELDS_DOC
from precision_rl.launch.runner import RunOptions, execute, parse_loggers, plan_run
from precision_rl.mismatch import run as mismatch_run
from precision_rl.paths import REPO_ROOT


def cmd_list(args) -> int:
    """Print the registry as a table; return 0."""
    specs = registry.load_all(PAPER)
    def arms(spec: ExperimentSpec) -> str:
        if len(spec.arms) <= 3:
            return ",".join(spec.arm_labels)
        trains, infers = sorted({a.train for a in spec.arms}), sorted({a.infer for a in spec.arms})
        return f"train {{{','.join(trains)}}} x infer {{{','.join(infers)}}}"

    def values(spec: ExperimentSpec) -> list[int]:
        assumed, conflicts = len(spec.assumptions), len(spec.conflicts)
        return [len(spec.sources) - assumed - conflicts, assumed, conflicts]

    rows = [[s.name, s.algorithm, arms(s), s.model, s.backend,
             ",".join(p.panel + (f":{p.precision}" if p.precision else "") for p in s.paper) or "-",
             s.variant_of or "-", *values(s)] for s in specs.values()]
    print(render_table(rows, ["experiment", "algorithm", "precision arms", "model", "backend", "paper panels",
                              "variant of", "sourced", "assumed", "conflict"]))
    print(f"\nValues the experiment sets (its `sources`, `make show EXP=...`): sourced = one published value; assumed = "
          f"nothing published, the suite's choice ({registry.ASSUMPTION_TAG}); conflict = the sources disagree, the "
          f"other value runs as a variant or an EXTRA override ({registry.CONFLICT_TAG}, docs/sources.md#conflicts). "
          f"Each field and the verl key it becomes: {FIELDS_DOC} (python -m precision_rl fields).")
    return 0


def cmd_fields(args) -> int:
    """Print (or with ``--write``, write docs/fields.md) every experiment field and its verl keys; return 0."""
    from precision_rl.fileio import atomic_write_text
    from precision_rl.launch.fields import fields_markdown

    text = fields_markdown()
    if args.write:
        atomic_write_text(REPO_ROOT / FIELDS_DOC, text)
        print(REPO_ROOT / FIELDS_DOC)
    else:
        print(text, end="")
    return 0


def cmd_show(args) -> int:
    """Print one experiment's resolved spec at a scale (auto: the scale a run here would take) and, at tiny scale, what
    its profile runs (the last step and the trainer's overrides); return 0."""
    decision = resolve_scale(args.scale, dry_run=True)
    spec = registry.load_experiment(args.experiment, decision.scale,
                                    profile=registry_profile(args.profile, decision.scale))
    print(f"# {spec.path} at scale {spec.scale} (SCALE={args.scale}: {decision.reason})"
          + (f", PROFILE={args.profile}" if args.profile in PAPER_PROFILES else ""))
    if spec.scale != PAPER:
        profile = profile_for(spec, check_profile(args.profile))
        print(f"# PROFILE={profile.name}: trains to step {profile.last_step(spec)}"
              + (f", a checkpoint every {profile.save_freq} steps" if profile.save_freq else "")
              + (f" (overrides: {' '.join(profile.overrides())})" if profile.overrides() else ""))
    print(yaml.safe_dump(spec.raw, sort_keys=False, allow_unicode=True), end="")
    return 0


def _precisions(args) -> list[str]:
    """Return the arms ``--precision`` names (repeatable, comma-separated), in order; empty for every arm."""
    return [p for chunk in args.precision for p in chunk.split(",") if p] if args.precision else []


def _selected_runs(specs: list[ExperimentSpec], precisions: list[str], panel: str | None) -> list[tuple[ExperimentSpec, PrecisionArm]]:
    wanted = [parse_arm(p) for p in precisions]
    runs = []
    for spec in specs:
        arms = spec.panel_arms(panel) if panel else list(spec.arms)
        if not arms:
            continue
        if wanted:
            for arm in wanted:
                spec.arm(arm.label)  # raises a clear error if the experiment lacks that arm
            arms = [a for a in arms if a in wanted]
        runs += [(spec, arm) for arm in arms]
    if not runs:
        raise UserError(f"no runs match{' panel ' + panel if panel else ''}"
                        f"{' precision ' + ','.join(precisions) if precisions else ''}")
    return runs


def _decide_and_select(args) -> tuple[ScaleDecision, list[tuple[ExperimentSpec, PrecisionArm]], RunOptions]:
    """Return the scale decision (announced loudly), the selected experiment arms and the run options of ``args``."""
    decision = resolve_scale(args.scale, dry_run=args.dry_run)
    specs = registry.select(args.experiments, decision.scale, profile=registry_profile(args.profile, decision.scale))
    precisions = _precisions(args)
    extra = tuple(shlex.split(args.extra or "")) + tuple(args.overrides)
    if args.watchdog is not None and args.watchdog < 0:
        raise UserError(f"WATCHDOG must be a number of seconds >= 0 (0 turns it off), got {args.watchdog}")
    options = RunOptions(dry_run=args.dry_run, gpus=args.gpus, nnodes=args.nnodes, extra=extra,
                         loggers=parse_loggers(args.loggers), watchdog_s=args.watchdog,
                         profile=check_profile(args.profile))
    selected = _selected_runs(specs, precisions, args.panel)
    print(f"== SCALE={args.scale} -> {decision.scale} ({decision.reason}) ==", file=sys.stderr)
    return decision, selected, options


def _preflight_stops(args, decision: ScaleDecision, selected: list[tuple[ExperimentSpec, PrecisionArm]],
                     options: RunOptions) -> bool:
    """Run the paper-scale preflight of each selected experiment before a real paper-scale run (not a dry run, not
    with ``--preflight skip``), print its table, and return True when a line failed (the run must not start)."""
    from precision_rl.launch.preflight import Target, failed, preflight, report

    if decision.scale != PAPER or options.dry_run or args.preflight == "skip":
        return False
    stop = False
    for spec in {spec.name: spec for spec, _ in selected}.values():
        target = Target(spec, options.gpus or spec.resources.gpus_per_node, options.nnodes or spec.resources.nnodes)
        lines = preflight(target)
        print(report(target, lines), file=sys.stderr)
        stop = stop or failed(lines)
    if stop:
        print("error: the preflight failed (✘ above): fix those lines, or PREFLIGHT=skip to start anyway",
              file=sys.stderr)
    return stop


def cmd_preflight(args) -> int:
    """Print the paper-scale preflight of one experiment on this machine; return 0, or 1 when a line failed."""
    from precision_rl.launch.preflight import Target, failed, preflight, report

    for value, name in ((args.gpus, "GPUS"), (args.nnodes, "NNODES")):
        if value is not None and value < 1:
            raise UserError(f"{name} must be a positive integer, got {value}")
    spec = registry.load_experiment(args.experiment, PAPER)
    target = Target(spec, args.gpus or spec.resources.gpus_per_node, args.nnodes or spec.resources.nnodes)
    lines = preflight(target)
    print(report(target, lines))
    return 1 if failed(lines) else 0


def cmd_run(args) -> int:
    """Run (or print, with --dry-run) every selected experiment × arm; return the first non-zero exit code."""
    if args.seed < 0:
        raise UserError(f"SEED must be a non-negative integer, got {args.seed}")
    decision, selected, options = _decide_and_select(args)
    if _preflight_stops(args, decision, selected, options):
        return 1
    options = replace(options, seed=args.seed, resume=args.resume)
    plans = [plan_run(spec, arm, decision, options) for spec, arm in selected]
    status, finished = 0, []
    for plan in plans:
        code = execute(plan)
        status = status or code
        if code == 0 and not options.dry_run:
            finished.append(plan.run_dir)
    if finished:
        from precision_rl.analysis.closing import closing_lines

        try:
            lines = closing_lines(finished)
        except UserError as err:  # the runs finished; only the verdict cannot be drawn
            lines = [f"no closing verdict: {err}"]
        for line in lines:
            print(line, file=sys.stderr)
    return status


def _parse_seeds(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        seeds = tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError:
        seeds = ()
    if not seeds or any(x < 0 for x in seeds):
        raise UserError(f"SEEDS must be non-negative integers separated by commas or spaces, got {text!r}")
    return seeds


def cmd_grid(args) -> int:
    """Run every selected experiment × arm × seed that has no finished run yet; return 0 when all have finished."""
    from precision_rl.launch.grid import describe, grid_eta, plan_grid, run_grid

    seeds = _parse_seeds(args.seeds)
    if args.profile == SMOKE:
        raise UserError(f"make grid runs whole experiments: PROFILE={SMOKE} checks an install with make run")
    decision, selected, options = _decide_and_select(args)
    tiny_only = [f"{spec.name} {arm.label}" for spec, arm in selected if arm not in spec.scale_arms]
    if tiny_only:
        print(f"left out at {decision.scale} scale (they run at tiny scale only): {', '.join(tiny_only)}", file=sys.stderr)
        selected = [(spec, arm) for spec, arm in selected if arm in spec.scale_arms]
        if not selected:
            raise UserError(f"no selected run runs at {decision.scale} scale")
    grid = plan_grid(selected, decision.scale, seeds, options.extra, options.profile)
    print(describe(grid), file=sys.stderr)
    print(grid_eta(grid, options.profile, options.extra), file=sys.stderr)
    if args.dry_run:
        return 0
    if _preflight_stops(args, decision, selected, options):
        return 1
    return run_grid(grid, decision, options)


def _add_resources(parser: argparse.ArgumentParser) -> None:
    """Add the paper-scale run's size: GPUs per node and nodes."""
    parser.add_argument("--gpus", type=int, help="GPUs per node (default: the experiment's)")
    parser.add_argument("--nnodes", type=int, help="nodes (default: the experiment's)")


def _add_selection(parser: argparse.ArgumentParser, experiments_nargs: str) -> None:
    """Add the options ``run`` and ``grid`` share: what to run, at which scale, with which overrides."""
    parser.add_argument("experiments", nargs=experiments_nargs, default=["*"])
    parser.add_argument("--precision", action="append", help="arm(s) to run, e.g. fp16 or train_bf16-infer_fp32")
    parser.add_argument("--panel", help="only the runs feeding this figure panel (e.g. fig4)")
    parser.add_argument("--scale", default="auto", choices=SCALE_CHOICES)
    parser.add_argument("--profile", default=DEFAULT_PROFILE,
                        help=f"tiny-scale profile: {' or '.join(PROFILES)} (default {DEFAULT_PROFILE}); paper scale: "
                             f"{' or '.join(PAPER_PROFILES)} (one GPU, a few steps) or none")
    parser.add_argument("--dry-run", action="store_true", help="print what would run and write nothing")
    _add_resources(parser)
    parser.add_argument("--extra", default="", help="extra Hydra overrides, one shell-quoted string")
    parser.add_argument("--loggers", default="console,file", help="verl loggers; 'file' is always on")
    parser.add_argument("--preflight", default="run", choices=("run", "skip"),
                        help="a paper-scale run first runs the preflight and stops on a failed line (skip: start anyway)")
    parser.add_argument("--watchdog", type=float, default=None,
                        help="stop a run after this many seconds without a new metrics line (0: off; default per scale)")


def cmd_tiny_model(args) -> int:
    """Train the shipped tiny base model again (``--rebuild``) and/or draw its sanity problems again
    (``--refilter``); refuse without either, since the model is shipped; return 0."""
    from precision_rl.tiny.data import PROBLEMS_FILE, refilter
    from precision_rl.tiny.pretrain import rebuild_shipped_model, shipped_model
    from precision_rl.tiny.shipped import SHIPPED_DIR, weights_sha256

    shown = SHIPPED_DIR.relative_to(REPO_ROOT)
    if not (args.rebuild or args.refilter):
        raise UserError(f"the tiny base model is shipped in {shown} (weights sha256 {weights_sha256()[:12]}…) and "
                        "never built on use: `make tiny-model REBUILD=1` trains it again from its recipe, "
                        "`make tiny-model REFILTER=1` draws its sanity problems again")
    if args.rebuild:
        result = rebuild_shipped_model()
        if result["identical"]:
            print(f"tiny model: the rebuild is byte-identical to {shown} (recorded in its build record)")
        else:
            print(f"tiny model: the rebuild differs from the shipped model in {', '.join(result['differing_files'])} "
                  f"(largest weight difference {result.get('max_abs_weight_difference', float('nan')):.3g}) and "
                  f"replaced it in {shown}; `git checkout -- {shown}` restores the shipped one, and the sanity "
                  f"problems ({PROBLEMS_FILE.name}) belong to it until `make tiny-model REFILTER=1`")
    if args.refilter:
        refilter(shipped_model())
    return 0


def cmd_heldout(args) -> int:
    """Print the success rates at T=1 (held-out and training problems) of a checkpoint of the newest local tiny run of
    each selected experiment arm, beside the shipped base's, with each checkpoint's change against the base and its
    standard errors (``heldout.change_from_base``), measuring each model once; return 0."""
    from precision_rl.launch import runs
    from precision_rl.paths import local_view, runs_root
    from precision_rl.tiny.heldout import RECORDS_DIR, change_from_base, checkpoint_steps, measured, model_name

    if args.seed < 0:
        raise UserError(f"SEED must be a non-negative integer, got {args.seed}")
    precisions = _precisions(args)
    checkpoints = []
    for spec, arm in _selected_runs(registry.select(args.experiments, "tiny"), precisions, None):
        run_dir = runs.latest_run_dir(runs_root(), "tiny", spec.name, arm.label, args.seed, args.profile)
        if run_dir is None:
            print(f"note: no local tiny run of {spec.name} {arm.label} seed {args.seed}"
                  + (f" in the {args.profile} profile" if args.profile else ""), file=sys.stderr)
            continue
        steps = checkpoint_steps(run_dir / runs.CHECKPOINTS_DIR)
        step = steps[-1] if args.step is None and steps else args.step
        if step not in steps:
            raise UserError(f"{run_dir} has no checkpoint weights{f' at step {step}' if step is not None else ''}"
                            f" (weights kept: {', '.join(map(str, steps)) or 'none'})")
        checkpoints.append((run_dir, run_dir / runs.CHECKPOINTS_DIR / f"global_step_{step}"))
    if not checkpoints:
        raise UserError(f"no local tiny run of {' '.join(args.experiments)} seed {args.seed} under {runs_root()}")
    base = {s.problem_set: s for s in measured(local_view().results / RECORDS_DIR, None)}
    rows = [[model_name(None), "", s.problem_set, f"{s.mean:.3f}", "", "", "", f"{s.all_right}/{len(s.rates)}",
             s.none_right] for s in base.values()]
    for run_dir, step_dir in checkpoints:
        for s in measured(run_dir / RECORDS_DIR, step_dir):
            change = change_from_base(s, base[s.problem_set])
            rows.append([model_name(step_dir), str(run_dir.relative_to(runs_root())), s.problem_set, f"{s.mean:.3f}",
                         f"{change.difference:+.3f}", f"{change.sampling_se:.3f}", f"{change.problems_se:.3f}",
                         f"{s.all_right}/{len(s.rates)}", s.none_right])
    print(render_table(rows, ["model", "run", "problems", "mean success (T=1)", "vs base", "SE (sampling)",
                              "SE (over problems)", "all answers right", "no answer right"], floatfmt=""))
    return 0


# Tools with a main of their own (``python -m <module>``), each behind a Make target; --help names them.
TOOLS = {
    "precision_rl.analysis.profile_times": "the README's profile-times block (make published-results)",
    "precision_rl.analysis.instrument_card": "docs/tiny.md's instrument numbers (make published-results)",
    "precision_rl.analysis.family_readmes": "each experiments/<family>/README.md's table (make published-results)",
    "precision_rl.analysis.synthetic_doses": "experiments/ladder/README.md's table of synthetic doses (make published-results)",
    "precision_rl.analysis.scale_differences": "docs/architecture.md's list of what the tiny scale adds (make published-results)",
    "precision_rl.analysis.test_record": "the test suite's recorded counts and times (make test-record)",
    "precision_rl.mismatch.batch_spread": "a small batch's mismatch over sampling seeds (make mismatch-spread)",
    "precision_rl.mismatch.bench": "the mismatch tool's benchmark (make bench-mismatch)",
    "precision_rl.mismatch.long_answers": "mismatch of a long-answer tiny model (make mismatch-long)",
    "precision_rl.mismatch.formats": "the mismatch ladder's real rungs offline (make mismatch-formats)",
    "precision_rl.mismatch.synthetic_dose": "each synthetic logit-noise strength's dose (make synthetic-dose)",
    "precision_rl.mismatch.token_weights": "where GRPO-Token-TIS's weights fall at a synthetic dose (make token-weights)",
    "precision_rl.mismatch.width": "mismatch of wider tiny models (make mismatch-width)",
    "precision_rl.tiny.solve_rates": "success rate by chain length of a tiny model (make solve-rates)",
}


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the command line."""
    tools = "\n".join(f"  python -m {module:<40} {about}" for module, about in TOOLS.items())
    parser = argparse.ArgumentParser(prog="precision_rl", description=__doc__.split("\n\n")[0],
                                     epilog=f"tools with a main of their own:\n{tools}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the experiment registry as a table").set_defaults(func=cmd_list)
    fields = sub.add_parser("fields", help="print every experiment field with the verl keys it renders to")
    fields.add_argument("--write", action="store_true", help=f"write the table to {FIELDS_DOC} instead")
    fields.set_defaults(func=cmd_fields)
    show = sub.add_parser("show", help="print an experiment's resolved spec")
    show.add_argument("experiment")
    show.add_argument("--scale", default="auto", choices=SCALE_CHOICES)
    show.add_argument("--profile", default=DEFAULT_PROFILE, choices=PROFILES + PAPER_PROFILES,
                      help="the profile to show (a tiny one, or a paper-scale one with --scale paper)")
    show.set_defaults(func=cmd_show)
    run = sub.add_parser("run", help="run experiments (names or globs like 'sanity/*')")
    _add_selection(run, "+")
    run.add_argument("--seed", type=int, default=registry.DEFAULT_SEEDS[0])
    run.add_argument("--resume", action="store_true", help="continue the newest run of the same identity")
    run.set_defaults(func=cmd_run)
    grid = sub.add_parser("grid", help="run every selected experiment x arm x seed not finished yet (resumable)")
    _add_selection(grid, "*")
    grid.add_argument("--seeds", help="seeds, e.g. '42,1,7' (default: the seeds each experiment names)")
    grid.set_defaults(func=cmd_grid)
    preflight = sub.add_parser("preflight", help="what would fail before a paper-scale run, one line per check with "
                                                 "its fix; starts nothing, writes nothing")
    preflight.add_argument("experiment", nargs="?", default=registry.INSTRUMENT_EXPERIMENT)
    _add_resources(preflight)
    preflight.set_defaults(func=cmd_preflight)
    data_command.add_parser(sub)
    mismatch_run.add_parser(sub)
    tiny = sub.add_parser("tiny-model", help="rebuild the shipped tiny base model or redraw its sanity problems")
    tiny.add_argument("--rebuild", action="store_true",
                      help="train the shipped base model again from its recipe and compare it with the shipped bytes")
    tiny.add_argument("--refilter", action="store_true",
                      help="draw the sanity problems again through the vLLM filter with the shipped model and rewrite "
                           "precision_rl/tiny/sanity_problems.json")
    tiny.set_defaults(func=cmd_tiny_model)
    heldout = sub.add_parser("heldout", help="success rates at T=1 of a tiny run's checkpoint and of the shipped base, "
                                             "on the held-out and the training problems, with the change "
                                             "against the base and its standard errors")
    heldout.add_argument("experiments", nargs="*", default=[registry.INSTRUMENT_EXPERIMENT])
    heldout.add_argument("--precision", action="append", help="arm(s), e.g. fp16 (default: every arm)")
    heldout.add_argument("--seed", type=int, default=registry.DEFAULT_SEEDS[0])
    heldout.add_argument("--step", type=int, help="checkpoint step (default: the last one whose weights are kept)")
    heldout.add_argument("--profile", choices=PROFILES, help="only runs of this profile (default: the newest run)")
    heldout.set_defaults(func=cmd_heldout)
    analysis_commands.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return its exit code (2 for a user error, 130 for Ctrl-C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    args.overrides = rest  # after `--`: extra Hydra overrides, passed through verbatim
    import signal
    import warnings

    warnings.formatwarning = lambda message, category, *a, **k: f"warning: {message}\n"

    def _terminate(signum, frame):
        raise KeyboardInterrupt  # a kill records an interrupted run, as Ctrl-C does

    signal.signal(signal.SIGTERM, _terminate)
    # A shell starts background jobs with SIGINT ignored, and Python keeps it ignored: `kill -INT` must still stop.
    signal.signal(signal.SIGINT, _terminate)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
