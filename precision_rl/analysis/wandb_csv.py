"""wandb CSV exports → runs for the tidy table, so users can plot runs they made elsewhere.

Two layouts: a run's history export (a ``_step`` column and one column per metric) and a chart export (a
``Step`` column and ``<run> - <metric>`` columns, with ``__MIN``/``__MAX`` companions that are skipped). An empty
cell means "not logged"; ``NaN``/``inf`` mean a logged non-finite value (NaN in the table, as verl's ``null``).
"""

from __future__ import annotations

import csv
import math
import re
import warnings
from dataclasses import asdict
from pathlib import Path

from precision_rl.analysis.records import EXTERNAL_STATUS, UNKNOWN, LogWarning, RunInfo, RunMetrics
from precision_rl.config.precision import parse_arm
from precision_rl.config.scale import PAPER, SCALES
from precision_rl.errors import UserError

_RUN_NAME_RE = re.compile(r"^(?P<exp>[A-Za-z0-9_.]+)-(?P<arm>fp16|bf16|fp32|train_[a-z0-9]+-infer_[a-z0-9]+)"
                          r"-s(?P<seed>\d+)$")


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    """Return (experiment, precision label, seed) of a run name ``<experiment>-<precision>-s<seed>``, or None."""
    match = _RUN_NAME_RE.match(name.strip())
    if not match:
        return None
    return match["exp"].replace(".", "/"), match["arm"], int(match["seed"])


def _wandb_info(name: str, path: Path, scale: str, overrides: dict) -> RunInfo:
    from precision_rl.config.registry import experiment_files, load_experiment

    parsed = parse_run_name(name)
    experiment = overrides.get("experiment") or (parsed[0] if parsed else None)
    label = overrides.get("precision") or (parsed[1] if parsed else None)
    seed = overrides.get("seed") if overrides.get("seed") is not None else (parsed[2] if parsed else None)
    if experiment is None or label is None or seed is None:
        raise UserError(f"{path}: cannot tell the experiment, precision and seed of wandb run {name!r}: name runs "
                        "<experiment>-<precision>-s<seed> (e.g. sanity.grpo-fp16-s42) or pass --experiment, "
                        "--precision and --seed")
    arm = parse_arm(label)
    algorithm = overrides.get("algorithm")
    if algorithm is None:
        algorithm = load_experiment(experiment, scale).algorithm if experiment in experiment_files() else UNKNOWN
    return RunInfo(run=name, scale=scale, experiment=experiment, algorithm=algorithm, precision_train=arm.train,
                   precision_infer=arm.infer, seed=int(seed), status=EXTERNAL_STATUS, source=str(path))


def _cells_to_values(cells: list[str], where: str, bad: set[str]) -> tuple[list[int], list[float]]:
    """Return (row indices, values) of the non-empty cells; 'NaN'/'inf' become NaN; other text is dropped."""
    idx, vals = [], []
    for i, cell in enumerate(cells):
        cell = cell.strip()
        if not cell:
            continue
        try:
            value = float(cell)
        except ValueError:
            bad.add(where)
            continue
        idx.append(i)
        vals.append(value if math.isfinite(value) else math.nan)
    return idx, vals


def read_wandb_csv(path: Path, scale: str = PAPER, run: str | None = None, experiment: str | None = None,
                   precision: str | None = None, seed: int | None = None,
                   algorithm: str | None = None) -> list[RunMetrics]:
    """Return the runs of a wandb CSV export.

    Two layouts are read: a run's history export (a ``_step`` column and one column per metric; the run is
    named by ``run`` or the file name) and a chart export (a ``Step`` column and ``<run> - <metric>`` columns;
    ``__MIN``/``__MAX`` columns are skipped). Run names that follow ``<experiment>-<precision>-s<seed>`` need
    nothing else; otherwise pass ``experiment``, ``precision`` and ``seed``.
    """
    path = Path(path)
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r} for {path}: choose paper or tiny")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise UserError(f"no such wandb CSV file: {path}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows or not rows[0]:
        raise UserError(f"{path}: empty CSV file")
    header, body = rows[0], rows[1:]
    columns = {name: [r[k] if k < len(r) else "" for r in body] for k, name in enumerate(header)}
    overrides = {"experiment": experiment, "precision": precision, "seed": seed, "algorithm": algorithm}
    step_col = next((c for c in ("_step", "Step", "step", "global_step") if c in columns), None)
    if step_col is None:
        raise UserError(f"{path}: no step column (_step or Step): not a wandb CSV export")
    try:
        steps = [int(float(s)) if s.strip() else None for s in columns[step_col]]
    except ValueError:
        raise UserError(f"{path}: column {step_col!r} holds non-numeric steps") from None
    chart = step_col != "_step" and any(" - " in c for c in header)
    per_run: dict[str, RunMetrics] = {}
    bad: set[str] = set()
    for name, cells in columns.items():
        if name == step_col or name.endswith(("__MIN", "__MAX")):
            continue
        if chart:
            if " - " not in name:
                continue
            run_name, metric = name.split(" - ", 1)
        else:
            if name.startswith("_"):
                continue
            run_name, metric = run or path.stem, name
        if run_name not in per_run:
            per_run[run_name] = RunMetrics(_wandb_info(run_name, path, scale, overrides))
        idx, vals = _cells_to_values(cells, metric, bad)
        target = per_run[run_name]
        for i, value in zip(idx, vals, strict=True):
            if steps[i] is not None:
                target.steps.append(steps[i])
                target.names.append(metric)
                target.values.append(value)
    if bad:
        warnings.warn(f"{path}: non-numeric values skipped in {', '.join(sorted(bad)[:5])}", LogWarning, stacklevel=2)
    if not chart and "_runtime" in columns:
        times = [float(c) for c in columns["_runtime"] if c.strip()]
        for target in per_run.values():
            target.info = RunInfo(**{**asdict(target.info), "wall_time_s": max(times) if times else None})
    if not per_run:
        raise UserError(f"{path}: no metric columns found")
    return list(per_run.values())
