"""The paper's Table 2 beside the suite's: the accuracy of the evaluation-only experiments (no RL) per validation set
and inference precision (``make tables`` → ``results/inference_precision.{csv,md}``).

The paper's values live in ``docs/paper_table2.yaml``, keyed by experiment (those whose ``paper:`` list names the
panel ``table2``, one per generation budget) and by paper-scale validation set; ``registry_problems`` checks that
the two agree. A run's value is its last ``val-core/<set>/acc/mean@n`` in percent (an evaluation-only run validates
once); each arm pools the experiment's counted runs (finished, or read from a wandb export) and shows their mean,
min–max band and n (``paper_compare.arm_values``, the same rules as the panels'). Table 2 gets no verdict of
direction: the paper's claim is that the inference precision barely moves accuracy (its FP16 − BF16 differences
have both signs), so the table sets the suite's FP16 − BF16 beside the paper's. A scale whose validation sets are
not the paper's (the tiny stand-ins validate on the tiny set) shows its own sets, without a paper value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter
from pydantic.dataclasses import dataclass as schema

from precision_rl import metrics as M
from precision_rl.analysis.logs import RunTable
from precision_rl.analysis.panel_notes import grid_command
from precision_rl.analysis.paper_compare import (
    ARMS,
    NOT_COMPARABLE,
    PENDING,
    Text,
    arm_cell,
    arm_values,
    cites_docs,
    load_validated,
)
from precision_rl.analysis.series import SeriesIndex
from precision_rl.analysis.tables import write_csv_and_markdown
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.registry import ExperimentSpec, load_all
from precision_rl.config.scale import PAPER, SCALES
from precision_rl.console import render_table
from precision_rl.paths import DOCS_DIR

TABLE2_PANEL = "table2"
PAPER_TABLE2 = DOCS_DIR / "paper_table2.yaml"
INFERENCE_CSV, INFERENCE_MD = "inference_precision.csv", "inference_precision.md"
ACCURACY = "accuracy"  # the per-run column arm_values reads: the last validation accuracy, in percent
INFERENCE_COLUMNS = (
    "scale", "experiment", "val_set", "paper_fp16", "paper_bf16", "paper_diff", "fp16_mean", "fp16_min", "fp16_max",
    "fp16_n", "bf16_mean", "bf16_min", "bf16_max", "bf16_n", "diff", "note",
)
MARKDOWN_HEADERS = ("experiment", "validation set", "paper FP16", "paper BF16", "paper FP16 − BF16", "FP16", "BF16",
                    "FP16 − BF16", "note")

Percent = Annotated[float, Field(ge=0, le=100)]


@schema(frozen=True, config=ConfigDict(extra="forbid"))
class ArmAccuracy:
    """The paper's accuracy (percent) of one experiment on one validation set, per inference precision."""

    fp16: Percent
    bf16: Percent


@schema(frozen=True, config=ConfigDict(extra="forbid"))
class PaperTable2:
    """The paper's Table 2: accuracy per experiment and validation set, what it shows in words, and the source."""

    source: Annotated[Text, AfterValidator(cites_docs)]
    reading: Text
    accuracy: dict[Text, Annotated[dict[Text, ArmAccuracy], Field(min_length=1)]]


_TABLE2 = TypeAdapter(PaperTable2)


def load_table2(path: Path = PAPER_TABLE2) -> PaperTable2:
    """Return the paper's Table 2 from ``path``, validated; a bad file raises a UserError naming the field."""
    return load_validated(path, _TABLE2)


def table2_experiments(specs: dict[str, ExperimentSpec]) -> list[str]:
    """Return the experiments of ``specs`` that feed Table 2, in registry order."""
    return [name for name, spec in specs.items() if any(ref.panel == TABLE2_PANEL for ref in spec.paper)]


def registry_problems(table2: PaperTable2, specs: dict[str, ExperimentSpec]) -> list[str]:
    """Return where the paper's Table 2 and the paper-scale registry ``specs`` disagree (empty when they agree): an
    experiment with values that does not feed Table 2, one that feeds it without values, a validation set with a
    value that the experiment does not validate on, or one it validates on without a value."""
    feeding = table2_experiments(specs)
    problems = [f"{name}: has Table 2 values but does not feed {TABLE2_PANEL}"
                for name in sorted(set(table2.accuracy) - set(feeding))]
    problems += [f"{name}: feeds {TABLE2_PANEL} but has no Table 2 values" for name in feeding
                 if name not in table2.accuracy]
    for name in feeding:
        sets, valued = specs[name].data.val, table2.accuracy.get(name, {})
        problems += [f"{name}: a Table 2 value for {val}, which it does not validate on" for val in valued
                     if val not in sets]
        problems += [f"{name}: validates on {val} without a Table 2 value" for val in sets
                     if name in table2.accuracy and val not in valued]
    return problems


def run_accuracies(table: RunTable, scale: str, experiments: list[str],
                   val_sets: dict[str, tuple[str, ...]]) -> pd.DataFrame:
    """Return one row per run of ``experiments`` at ``scale`` in ``table`` and validation set of ``val_sets`` (its
    experiment's): scale, experiment, precision, status, val_set and ACCURACY, the run's last logged accuracy on the
    set in percent (NaN when it logged none)."""
    index = SeriesIndex(table.metrics)
    runs = table.runs[(table.runs["scale"] == scale) & table.runs["experiment"].isin(experiments)]
    rows = []
    for run in runs.itertuples(index=False):
        logged = index.logged(scale, str(run.run))
        precision = PrecisionArm(run.precision_train, run.precision_infer).label
        for val_set in val_sets[str(run.experiment)]:
            metric = M.val_metric(logged, val_set)
            series = index.get(scale, str(run.run), metric) if metric else None
            accuracy = 100.0 * float(series.iloc[-1]) if series is not None and len(series) else np.nan
            rows.append({"scale": scale, "experiment": run.experiment, "precision": precision,
                         "status": run.status, "val_set": val_set, ACCURACY: accuracy})
    return pd.DataFrame(rows, columns=["scale", "experiment", "precision", "status", "val_set", ACCURACY])


def _note(scale: str, experiment: str, val_set: str, table2: PaperTable2, arms: list, paper_sets: list[str]) -> str:
    if val_set not in table2.accuracy.get(experiment, {}):
        return f"{NOT_COMPARABLE}: {val_set} is not one of the paper's sets ({', '.join(paper_sets) or 'none'})"
    if not all(a.complete for a in arms):
        missing = [a.label for a in arms if not a.complete]
        return f"{PENDING}: no finished {' or '.join(missing)} run: {grid_command([experiment], scale)}"
    return ""


def inference_table(table: RunTable, table2: PaperTable2 | None = None,
                    scales: tuple[str, ...] = SCALES) -> pd.DataFrame:
    """Return Table 2 beside the runs of ``table`` (columns INFERENCE_COLUMNS): one row per scale, experiment feeding
    Table 2 and validation set it validates on at that scale, with the paper's accuracies where the set is the
    paper's (default values: docs/paper_table2.yaml)."""
    table2 = load_table2() if table2 is None else table2
    paper_specs = load_all(PAPER)
    rows = []
    for scale in scales:
        specs = load_all(scale)
        experiments = table2_experiments(specs)
        val_sets = {name: specs[name].data.val for name in experiments}
        accuracies = run_accuracies(table, scale, experiments, val_sets)
        for name in experiments:
            for val_set in val_sets[name]:
                per_set = accuracies[accuracies["val_set"] == val_set]
                fp16, bf16 = (arm_values(per_set, scale, [name], arm, ACCURACY) for arm in ARMS)
                paper = table2.accuracy.get(name, {}).get(val_set)
                row = {"scale": scale, "experiment": name, "val_set": val_set,
                       "paper_fp16": paper.fp16 if paper else np.nan, "paper_bf16": paper.bf16 if paper else np.nan,
                       "paper_diff": paper.fp16 - paper.bf16 if paper else np.nan,
                       "diff": fp16.mean - bf16.mean if fp16.n and bf16.n else np.nan,
                       "note": _note(scale, name, val_set, table2, [fp16, bf16], list(paper_specs[name].data.val))}
                for arm in (fp16, bf16):
                    key = arm.label.lower()
                    row.update({f"{key}_mean": arm.mean, f"{key}_min": arm.low, f"{key}_max": arm.high,
                                f"{key}_n": arm.n})
                rows.append(row)
    return pd.DataFrame(rows, columns=list(INFERENCE_COLUMNS))


def _points(value: float, signed: bool = False) -> str:
    return "" if pd.isna(value) else format(value, "+.2f" if signed else ".2f")


def to_markdown(rows: pd.DataFrame, table2: PaperTable2 | None = None) -> str:
    """Return Table 2 beside the suite's accuracies as a Markdown document: one table per scale, the paper's reading
    and the definitions below."""
    table2 = load_table2() if table2 is None else table2
    parts = ["# Table 2: inference precision before RL, beside the paper", "",
             "Written by `make tables` from the local runs (the committed copy: `make published-results`, from results/logs); "
             f"the paper's values: [docs/paper_table2.yaml](../docs/paper_table2.yaml), read from "
             f"{table2.source}. The paper: {table2.reading}", ""]
    for scale, group in rows.groupby("scale", sort=False):
        cells = [[row.experiment, row.val_set, _points(row.paper_fp16), _points(row.paper_bf16),
                  _points(row.paper_diff, signed=True), arm_cell(pd.Series(row._asdict()), "fp16", ".2f"),
                  arm_cell(pd.Series(row._asdict()), "bf16", ".2f"), _points(row.diff, signed=True), row.note]
                 for row in group.itertuples(index=False)]
        parts += [f"## {scale} scale", "", render_table(cells, MARKDOWN_HEADERS, markdown=True, floatfmt=""), ""]
    parts += ["Definitions: accuracy in percent, a run's last `val-core/<set>/acc/mean@n` (an evaluation-only run "
              "validates once, before any update); FP16 and BF16 show the mean over the experiment's finished runs "
              "and wandb exports of that inference precision, the min–max band and n, the number of runs (seeds). "
              "FP16 − BF16 is in points. There is no verdict of direction: the paper's differences have both signs.",
              ""]
    return "\n".join(parts)


def write_inference_table(rows: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``inference_precision.csv`` and ``inference_precision.md`` into ``out_dir`` atomically; return both
    paths."""
    return write_csv_and_markdown(rows, to_markdown(rows), Path(out_dir) / INFERENCE_CSV,
                                  Path(out_dir) / INFERENCE_MD)
