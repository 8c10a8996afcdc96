"""A grid of runs (experiments x precision arms x seeds) that can be completed over several sittings.

Each run of the grid is found by its identity in the runs folder: a finished run is skipped, as is one published
under ``results/logs/`` (so a fresh clone does not redo the committed runs), an unfinished one
(failed, interrupted, killed, died) is continued with ``RESUME=1``, a missing one is started, and one whose launcher
still runs elsewhere is left alone. Stopping the grid (Ctrl-C) records the current run as interrupted; the next
``make grid`` continues from there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from precision_rl.config.precision import PrecisionArm
from precision_rl.config.profiles import DEFAULT_PROFILE, profile_for
from precision_rl.config.registry import ExperimentSpec
from precision_rl.config.scale import ScaleDecision
from precision_rl.console import render_table
from precision_rl.launch import eta, runs
from precision_rl.launch.runner import RunOptions, execute, plan_run
from precision_rl.paths import logs_root, runs_root, timing_run_roots

# What the grid does with a run, by the state of its newest directory.
SKIP, RESUME, START, BUSY = "skip (finished)", "resume", "start", "skip (running elsewhere)"
PUBLISHED = "skip (published)"


@dataclass(frozen=True)
class GridRun:
    """One run of the grid and what the grid will do with it."""

    spec: ExperimentSpec
    arm: PrecisionArm
    seed: int
    action: str

    @property
    def name(self) -> str:
        """Return the run's identity ``<experiment>-<precision>-s<seed>``."""
        return runs.run_name(self.spec.name, self.arm.label, self.seed)


def _covers(run_dir, last_step: int | None) -> bool:
    """Return whether a finished run logged the profile's last step (a quick run does not cover a calibrated one)."""
    logged = runs.last_logged_step(run_dir)
    return last_step is None or (logged is not None and logged >= last_step)


def action_for(scale: str, spec: ExperimentSpec, arm: PrecisionArm, seed: int, extra: tuple[str, ...] = (),
               profile: str = DEFAULT_PROFILE) -> str:
    """Return what the grid does with this run in ``profile``, from its newest run directory of the same
    configuration.

    A run made from an older version of the experiment (or other extra overrides) does not count: a new run starts
    beside it. A finished run that stopped before the profile's last step (a quick run, for a calibrated grid) is
    resumed to it.
    """
    last_step = profile_for(spec, profile).last_step(spec)
    published = runs.latest_run_dir(logs_root(), scale, spec.name, arm.label, seed)
    if published is not None and (published / runs.MANIFEST).is_file():
        manifest = runs.read_manifest(published)
        if runs.effective_status(manifest) == runs.FINISHED and runs.made_from(manifest, spec.raw, extra) \
                and _covers(published, last_step):
            return PUBLISHED
    run_dir = runs.latest_run_dir(runs_root(), scale, spec.name, arm.label, seed)
    if run_dir is None or not (run_dir / runs.MANIFEST).is_file():
        return START
    manifest = runs.read_manifest(run_dir)
    status = runs.effective_status(manifest)
    if status == runs.RUNNING:
        return BUSY
    if not runs.made_from(manifest, spec.raw, extra):
        return START
    return SKIP if status == runs.FINISHED and _covers(run_dir, last_step) else RESUME


def plan_grid(selected: list[tuple[ExperimentSpec, PrecisionArm]], scale: str,
              seeds: tuple[int, ...] | None = None, extra: tuple[str, ...] = (),
              profile: str = DEFAULT_PROFILE) -> list[GridRun]:
    """Return the grid's runs: every selected arm on ``seeds`` (default: the seeds each experiment names)."""
    return [GridRun(spec, arm, seed, action_for(scale, spec, arm, seed, extra, profile))
            for spec, arm in selected for seed in (seeds or spec.seeds)]


def describe(grid: list[GridRun]) -> str:
    """Return the grid as a table, one run a line, with a count of each action."""
    rows = [[i + 1, g.name, g.action] for i, g in enumerate(grid)]
    counts = {a: sum(g.action == a for g in grid) for a in (START, RESUME, SKIP, PUBLISHED, BUSY)}
    summary = ", ".join(f"{n} to {a}" if a in (START, RESUME) else f"{n} {a}" for a, n in counts.items() if n)
    return render_table(rows, ["#", "run", "action"]) + f"\n{len(grid)} runs: {summary}"


def _same_run_kind(item: GridRun, extra: tuple[str, ...]):
    """Return a test of a committed manifest: a run of ``item``'s experiment as registered now and of its arm?"""
    def matches(doc: dict) -> bool:
        return runs.made_from(doc, item.spec.raw, extra) and doc.get("experiment") == item.spec.name \
            and (doc.get("precision") or {}).get("label") == item.arm.label

    return matches


def grid_eta(grid: list[GridRun], profile: str = DEFAULT_PROFILE, extra: tuple[str, ...] = ()) -> str:
    """Return one line with the expected wall time of the grid's runs still to start, from the committed runs of each
    one's configuration and arm on the CPU kind nearest this machine (``eta``), or, where none exists, from committed
    runs of its batch shape (``eta.same_cost_shape``); it names how many were timed that way and those it has no
    estimate for. A run to resume is counted whole."""
    total, by_shape, unknown = 0.0, [], []
    hardware = runs.hardware()
    for item in (g for g in grid if g.action in (START, RESUME)):
        last = profile_for(item.spec, profile).last_step(item.spec)
        found = eta.estimate(hardware, _same_run_kind(item, extra), 1, last, timing_run_roots()) if last else None
        if found is None and last:
            planned = {"scale": item.spec.scale, "spec": item.spec.raw,
                       "precision": {"train": item.arm.train, "infer": item.arm.infer}}
            found = eta.estimate(hardware, eta.same_cost_shape(planned), 1, last, timing_run_roots())
            if found is not None:
                by_shape.append(item.name)
        if found is None:
            unknown.append(item.name)
        else:
            total += found.seconds
    pending = sum(g.action in (START, RESUME) for g in grid)
    line = f"ETA of the {pending} pending run(s): {eta.format_duration(total)}"
    if by_shape:
        line += (f", {len(by_shape)} of them timed by committed runs of other configurations with their model, batch "
                 "and lengths")
    return line + (f", without {len(unknown)} that no committed run of their configuration or batch shape times "
                   f"({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''})" if unknown else "")


def run_grid(grid: list[GridRun], decision: ScaleDecision, options: RunOptions) -> int:
    """Run the grid's pending runs one after another; return 0 when every run of the grid has finished, else 1.

    A run that fails does not stop the grid; the summary at the end names it.
    """
    pending = [g for g in grid if g.action in (START, RESUME)]
    failed: list[str] = []
    for done, item in enumerate(pending):
        print(f"== grid {done + 1}/{len(pending)}: {item.name} ({item.action}) ==", file=sys.stderr)
        run_options = replace(options, seed=item.seed, resume=item.action == RESUME)
        code = execute(plan_run(item.spec, item.arm, decision, run_options))
        if code != 0:
            failed.append(item.name)
    busy = [g.name for g in grid if g.action == BUSY]
    print(f"grid: {len(pending) - len(failed)} of {len(pending)} pending runs finished, "
          f"{len(grid) - len(pending)} skipped" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; still running elsewhere: {', '.join(busy)}" if busy else ""), file=sys.stderr)
    return 1 if failed or busy else 0
