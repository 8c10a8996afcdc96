"""How long a run will take, read from the committed runs of its configuration on the CPU kind nearest this one.

A run's start-up, validation before training and shutdown come from the first attempt of each committed run (its wall
time less its steps), its steps from their logged ``timing_s/step``. Of the committed runs of the same configuration
and precision arm, those on the nearest CPU kind count (vendor, then family and model, then matrix instructions, then core count),
and of those the runs that had the machine to themselves where there are any (an attempt that recorded other verl runs
beside it, ``shared_with``, ran slower), and of those the runs in the first folder of committed runs that holds any
(the published runs before the calibration runs, which time the CPU kinds no published run was made on); the estimate
is the median over them, and it says which CPU they ran on. Runs of another CPU kind are scaled by how much slower
this kind stepped in the configurations committed on both (``kind_ratio``), where any was.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from precision_rl.launch import runs
from precision_rl.metrics import STEP_TIME


@dataclass(frozen=True)
class Estimate:
    """The expected wall time of steps ``first_step``..``last_step`` (start-up included) and where it was read."""

    seconds: float
    first_step: int
    last_step: int
    runs: tuple[str, ...]  # the committed run directories the estimate was read from
    cpu: str  # the CPU they ran on, as their manifests name it
    same_kind: bool  # whether that CPU is of this machine's kind (vendor, family, model and matrix instructions)
    shared: bool = False  # whether the runs it was read from had other verl runs beside them (none ran alone)
    kind_ratio: KindRatio | None = None  # for runs of another CPU kind: how much slower this kind steps, where known

    def describe(self) -> str:
        """Return the estimate as one line, e.g. ``ETA 4.1 h for steps 1-300 with start-up (median of 3 committed
        run(s) on ...)``."""
        where = "this CPU kind" if self.same_kind else "another CPU kind: no committed run of this configuration " \
                                                       "ran on this one"
        if not self.same_kind and self.kind_ratio:
            where += (f"; scaled by {self.kind_ratio.ratio:.2f}, this kind's step time over theirs in "
                      f"{self.kind_ratio.configurations} configuration(s) committed on both")
        beside = "; they shared the machine with other runs" if self.shared else ""
        return (f"ETA {format_duration(self.seconds)} for steps {self.first_step}-{self.last_step} with start-up "
                f"(median of {len(self.runs)} committed run(s) on {self.cpu}; {where}{beside})")


@dataclass(frozen=True)
class KindRatio:
    """How many times as long a step takes on one CPU kind as on another, and over how many configurations (with
    their arm) committed on both it was measured."""

    ratio: float
    configurations: int


def format_duration(seconds: float) -> str:
    """Return ``seconds`` as minutes under 90 minutes and as hours above, e.g. ``47 min`` or ``4.1 h``."""
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def cpu_label(hardware: dict) -> str:
    """Return a CPU as runs name it: model name, vendor/family/model where recorded, and matrix instructions."""
    parts = [hardware.get("cpu_model") or "unknown CPU"]
    if hardware.get("cpu_id"):
        parts.append(f"({hardware['cpu_id'].rsplit(' stepping', 1)[0]})")
    flags = hardware.get("matrix_flags") or []
    parts.append(f"[{', '.join(flags)}]" if flags else "[no matrix flags recorded]")
    return " ".join(parts)


def kind_distance(mine: dict, theirs: dict) -> tuple[int, int, int, int]:
    """Return how far two manifests' ``hardware`` records are apart as CPU kinds, most telling difference first:
    vendor, family and model, matrix instructions, core count (0 where equal, 1 where not or unrecorded)."""
    def ident(hw: dict) -> list[str]:
        words = (hw.get("cpu_id") or "").split()
        return [words[0] if words else "", " ".join(words[1:5])]

    (vendor_a, model_a), (vendor_b, model_b) = ident(mine), ident(theirs)
    return (int(not vendor_a or vendor_a != vendor_b), int(not model_a or model_a != model_b),
            int(sorted(mine.get("matrix_flags") or []) != sorted(theirs.get("matrix_flags") or [])),
            int(mine.get("cpu_count") != theirs.get("cpu_count")))


def step_times(run_dir: Path) -> tuple[dict[int, float], dict[int, dict[int, float]]]:
    """Return a run's ``timing_s/step`` by step (a later attempt wins) and, per attempt, the step times it logged;
    unreadable lines are skipped."""
    merged: dict[int, float] = {}
    per_attempt: dict[int, dict[int, float]] = {}
    for attempt, path in enumerate(runs.attempt_files(run_dir)):
        times = per_attempt.setdefault(attempt, {})
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
                value = float(record["data"][STEP_TIME])
                times[int(record["step"])] = value
            except (ValueError, KeyError, TypeError):
                continue
        merged.update(times)
    return merged, per_attempt


def _stamp_seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").timestamp()


def overhead_s(doc: dict, per_attempt: dict[int, dict[int, float]]) -> float | None:
    """Return the first attempt's wall time less the steps it logged (start-up, validation before training and
    shutdown; for an interrupted attempt also the part of a step it did not finish), or None where it recorded no
    start and end."""
    first = next((a for a in doc.get("attempts") or [] if a.get("attempt") == 0), None)
    try:
        wall = _stamp_seconds(first["ended"]) - _stamp_seconds(first["started"])
    except (TypeError, KeyError, ValueError):
        return None
    return max(0.0, wall - sum(per_attempt.get(0, {}).values()))


def committed_runs(roots: tuple[Path, ...]) -> Iterator[tuple[int, Path, dict]]:
    """Yield ``(index of its root, run directory, manifest)`` for each readable committed run under ``roots``, in
    order; a run committed under two roots at the same place (a published run kept among the calibration runs) is
    yielded once, from the first. An unreadable manifest is passed over: it times nothing, and an ETA never stops a
    run."""
    seen = set()
    for rank, root in enumerate(roots):
        for run_dir in (p.parent for p in sorted(Path(root).rglob(runs.MANIFEST)) if Path(root).is_dir()):
            if run_dir.relative_to(root) in seen:
                continue
            seen.add(run_dir.relative_to(root))
            try:
                doc = runs.read_manifest(run_dir)
            except (OSError, ValueError):
                continue
            yield rank, run_dir, doc


def _arm(doc: dict) -> tuple:
    return (doc.get("precision") or {}).get("train"), (doc.get("precision") or {}).get("infer")


def _ran_alone(doc: dict) -> bool:
    return not any(attempt.get("shared_with") for attempt in doc.get("attempts") or [])


def kind_ratio(mine: dict, theirs: dict, roots: tuple[Path, ...]) -> KindRatio | None:
    """Return how many times as long a step takes on the CPU kind of ``mine`` as on that of ``theirs`` (manifests'
    ``hardware`` records), from the committed runs under ``roots``: for each configuration and arm with runs on both
    kinds, the median step time of one kind's runs (those that ran alone, where any did) over the other's, over the
    steps both kinds logged; the median of those ratios. None where no configuration was run on both kinds."""
    sides: dict[tuple, tuple[list, list]] = {}
    for _, run_dir, doc in committed_runs(roots):
        hardware = doc.get("hardware") or {}
        side = 0 if kind_distance(mine, hardware)[:3] == (0, 0, 0) else \
            1 if kind_distance(theirs, hardware)[:3] == (0, 0, 0) else None
        if side is not None:
            sides.setdefault((runs.configuration_key(doc), _arm(doc)), ([], []))[side].append(
                (_ran_alone(doc), step_times(run_dir)[0]))
    ratios = []
    for both in sides.values():
        own, other = ([times for alone, times in side if alone or not any(a for a, _ in side)] for side in both)
        common = set().union(*own) & set().union(*other) if own and other else set()
        if common:
            theirs_s = statistics.median(t[s] for t in other for s in common if s in t)
            if theirs_s > 0:
                ratios.append(statistics.median(t[s] for t in own for s in common if s in t) / theirs_s)
    return KindRatio(statistics.median(ratios), len(ratios)) if ratios else None


def same_run_kind(configuration: str, precision: dict) -> Callable[[dict], bool]:
    """Return a test of a committed manifest: is it a run of ``configuration`` (``runs.configuration_key``) and of the
    arm ``precision`` (a manifest's ``{"train": ..., "infer": ...}``)?"""
    arm = (precision.get("train"), precision.get("infer"))
    return lambda doc: runs.configuration_key(doc) == configuration and \
        ((doc.get("precision") or {}).get("train"), (doc.get("precision") or {}).get("infer")) == arm


# The hyper fields that set what a step computes (how many sequences, how long, how many passes): runs that agree on
# them, the model, the backend and the arm cost alike per step, whatever else differs.
COST_FIELDS = ("train_batch_size", "rollout_n", "max_prompt_length", "max_response_length", "ppo_mini_batch_size",
               "ppo_micro_batch_size_per_gpu", "ppo_epochs", "val_n", "test_freq")


def cost_shape(doc: dict) -> tuple:
    """Return what sets a run's cost per step, from its manifest: scale, model, backend and ``COST_FIELDS``."""
    spec = doc.get("spec") or {}
    hyper = spec.get("hyper") or {}
    return (doc.get("scale"), spec.get("model"), spec.get("backend"), *(hyper.get(k) for k in COST_FIELDS))


def same_cost_shape(doc: dict) -> Callable[[dict], bool]:
    """Return a test of a committed manifest: does it cost per step what the run of manifest ``doc`` will (its
    ``cost_shape`` and precision arm), whatever its configuration? The fallback where no committed run of the same
    configuration exists (a new experiment on an old profile)."""
    shape = cost_shape(doc)
    arm = ((doc.get("precision") or {}).get("train"), (doc.get("precision") or {}).get("infer"))
    return lambda other: cost_shape(other) == shape and \
        ((other.get("precision") or {}).get("train"), (other.get("precision") or {}).get("infer")) == arm


def estimate(hardware: dict, matches: Callable[[dict], bool], first_step: int, last_step: int,
             roots: tuple[Path, ...]) -> Estimate | None:
    """Return the estimate for steps ``first_step``..``last_step`` of a run on a machine with ``hardware`` (a
    manifest's record), read from the committed runs under ``roots`` whose manifest ``matches`` (its configuration and
    arm: ``same_run_kind``) and that logged every one of those steps, start-up added: of the nearest CPU kind, the runs
    that ran alone where any did, and of those the runs under the first of ``roots`` that holds any (a run found under
    two roots at the same place counts once). Runs of another CPU kind are scaled by ``kind_ratio`` where some
    configuration was committed on both kinds. None where no such committed run exists."""
    found = []
    for rank, run_dir, doc in committed_runs(roots):
        if not matches(doc):
            continue
        times, per_attempt = step_times(run_dir)
        if not all(s in times for s in range(first_step, last_step + 1)):
            continue
        start = overhead_s(doc, per_attempt)
        if start is None:
            continue
        seconds = start + sum(times[s] for s in range(first_step, last_step + 1))
        found.append(((*kind_distance(hardware, doc.get("hardware") or {}), int(not _ran_alone(doc)), rank), seconds,
                      run_dir, doc))
    if not found:
        return None
    nearest = min(distance for distance, *_ in found)
    chosen = [f for f in found if f[0] == nearest]
    seconds, theirs = statistics.median(s for _, s, _, _ in chosen), chosen[0][3].get("hardware") or {}
    same_kind = nearest[:3] == (0, 0, 0)
    ratio = None if same_kind else kind_ratio(hardware, theirs, roots)
    return Estimate(seconds * (ratio.ratio if ratio else 1.0), first_step, last_step,
                    tuple(str(d) for _, _, d, _ in chosen), cpu_label(theirs), same_kind, bool(nearest[4]), ratio)
