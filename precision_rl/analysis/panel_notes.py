"""What a figure says about the runs it draws and those it cannot: every arm's seeds, or why it drew nothing ("BF16:
not run yet" with the ``make grid`` that runs it, "run unfinished (died)", "no data (… not logged)", at paper scale
"not run (paper scale needs GPUs)"), across a panel when nothing is drawn, in its corner otherwise, and in a legend
shared by a figure's panels."""

from __future__ import annotations

import re
from dataclasses import dataclass

from precision_rl.analysis import plotting as P
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.registry import ExperimentSpec
from precision_rl.config.scale import PAPER

NOT_RUN_YET = "not run yet"
NEEDS_GPUS = "not run (paper scale needs GPUs)"
TINY_ONLY = "runs at tiny scale only (the paper scale refuses it)"
MAX_LISTED_ARMS = 3  # a note names at most this many arms sharing a state, else counts them


@dataclass(frozen=True)
class ArmRuns:
    """One (experiment, arm) of a panel: its legend label, its finished runs (drawn) and the statuses of its
    unfinished ones (not drawn)."""

    spec: ExperimentSpec
    arm: PrecisionArm
    label: str
    finished: tuple[str, ...]
    unfinished: tuple[str, ...]


def grid_command(experiments: list[str], scale: str, precisions: tuple[str, ...] = ()) -> str:
    """Return the ``make grid`` command that runs ``experiments`` at ``scale``, only their ``precisions`` arms when
    given: ``make grid EXP='sanity/gspo' PRECISION=fp16 SCALE=tiny`` (the grid skips the runs that finished)."""
    only = f" PRECISION={','.join(precisions)}" if precisions else ""
    return f"make grid EXP='{' '.join(sorted(set(experiments)))}'{only} SCALE={scale}"


def grid_commands(arms: list[ArmRuns], scale: str) -> list[str]:
    """Return the ``make grid`` commands that run exactly ``arms``' experiment arms (and no other arm of their
    experiments): one command for the experiments wanted whole, one per set of arms wanted from the others."""
    wanted: dict[str, set[str]] = {}
    for arm in arms:
        wanted.setdefault(arm.spec.name, set()).add(arm.arm.label)
    whole = {arm.spec.name: set(arm.spec.arm_labels) <= wanted[arm.spec.name] for arm in arms}
    by_labels: dict[tuple[str, ...], list[str]] = {}
    for name, labels in wanted.items():
        key = () if whole[name] else tuple(sorted(labels))
        by_labels.setdefault(key, []).append(name)
    return [grid_command(names, scale, labels) for labels, names in sorted(by_labels.items())]


def why_missing(arm: ArmRuns, scale: str, what: str, nonpositive: bool = False) -> str:
    """Return why ``arm`` draws nothing in a panel: its finished runs logged ``what`` only at or below zero on a
    log scale (``nonpositive``), or not at all, none of its runs finished, or it has none (at paper scale: needs
    GPUs, or runs at tiny scale only)."""
    if arm.finished:
        return f"{what} ≤ 0 throughout (log scale)" if nonpositive else f"no data ({what} not logged)"
    if arm.unfinished:
        plural = "s" if len(arm.unfinished) > 1 else ""
        return f"run{plural} unfinished ({', '.join(sorted(set(arm.unfinished)))})"
    if scale != PAPER:
        return NOT_RUN_YET
    return TINY_ONLY if arm.spec.runs_at_tiny_scale_only(arm.arm) else NEEDS_GPUS


def panel_lines(arms: list[ArmRuns], seeds: list[int], scale: str, what: str,
                nonpositive: frozenset[str] = frozenset()) -> list[str]:
    """Return a note on ``arms``, one line per group of arms in the same state, drawn arms first: "FP16, BF16:
    3 seeds", "BF16: not run yet —" followed by the lines of ``grid_commands`` ("make grid EXP='sanity/gspo'
    PRECISION=bf16 SCALE=tiny"); ``seeds`` holds the seeds each arm drew (0: none); ``nonpositive`` names the arms
    whose values were all ≤ 0 on a log scale. More than MAX_LISTED_ARMS arms in one state are counted, not named."""
    groups: dict[str, list[ArmRuns]] = {}
    for arm, n in sorted(zip(arms, seeds, strict=True), key=lambda pair: pair[1] == 0):
        state = P.seeds_label(n) if n else why_missing(arm, scale, what, arm.label in nonpositive)
        groups.setdefault(state, []).append(arm)
    lines = []
    for state, group in groups.items():
        labels = list(dict.fromkeys(a.label for a in group))
        who = ", ".join(labels) if len(labels) <= MAX_LISTED_ARMS else f"{len(labels)} arms"
        if state == NOT_RUN_YET:
            lines += [f"{who}: {state} —", *grid_commands(group, scale)]
        else:
            lines.append(f"{who}: {state}")
    return lines


def shortfall_lines(arms: list[ArmRuns], seeds: list[int], scale: str, what: str,
                    nonpositive: frozenset[str] = frozenset()) -> list[str]:
    """Return a note on the arms that drew fewer seeds in a panel than they finished (what a shared legend says):
    "BF16 GRPO: 2 of 3 seeds", or "BF16 GRPO: no data (… not logged)"."""
    out = []
    for arm, n in zip(arms, seeds, strict=True):
        if n < len(arm.finished):
            out.append(f"{arm.label}: " + (f"{n} of {P.seeds_label(len(arm.finished))}" if n
                                            else why_missing(arm, scale, what, arm.label in nonpositive)))
    return out


def finish_panel(ax, arms: list[ArmRuns], seeds: list[int], scale: str, what: str, legend_has_seeds: bool = False,
                 nonpositive: frozenset[str] = frozenset()) -> None:
    """Write the panel's note: every arm's state (``panel_lines``) across the panel when no arm drew; otherwise in
    its corner, only the arms short of what the figure's legend says when ``legend_has_seeds``, else every arm's
    state."""
    if not arms:
        P.mark_empty(ax, "no experiment feeds this panel at this scale")
    elif not any(seeds):
        P.mark_empty(ax, panel_lines(arms, seeds, scale, what, nonpositive))
    elif legend_has_seeds:
        P.corner_note(ax, shortfall_lines(arms, seeds, scale, what, nonpositive))
    else:
        P.corner_note(ax, panel_lines(arms, seeds, scale, what, nonpositive))


def legend_label(arm: ArmRuns) -> str:
    """Return ``arm``'s entry in a legend shared by every panel of a figure: "BF16 GRPO: 3 seeds"."""
    return f"{arm.label}: {P.seeds_label(len(arm.finished))}"


def shared_legend(fig, arms: list[ArmRuns], looks: list[tuple[str, str]], drew: list[bool], scale: str) -> None:
    """Draw the legend of a figure whose panels all draw the same runs: each arm that drew with its seeds, and,
    when any arm drew, a line under it naming the arms that drew nowhere and why (``panel_lines``)."""
    P.figure_legend(fig, {legend_label(a): look for a, look, d in zip(arms, looks, drew, strict=True) if d})
    if any(drew):
        absent = [a for a, d in zip(arms, drew, strict=True) if not d]
        P.header_note(fig, panel_lines(absent, [0] * len(absent), scale, "these metrics"))


def panel_ids(specs: dict[str, ExperimentSpec], prefix: str) -> list[str]:
    """Return the panel ids (e.g. fig1a … fig1l) that registry experiments name with ``prefix``, sorted."""
    pattern = re.compile(rf"^{re.escape(prefix)}[a-z]$")
    return sorted({ref.panel for spec in specs.values() for ref in spec.paper if pattern.match(ref.panel)})


def panel_arms(specs: dict[str, ExperimentSpec], panel: str) -> list[tuple[ExperimentSpec, PrecisionArm]]:
    """Return the (experiment, arm) pairs feeding ``panel``; ``fig3:bf16`` keeps only the bf16 arm."""
    return [(spec, arm) for spec in specs.values() for arm in spec.panel_arms(panel)]
