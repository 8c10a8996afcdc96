"""A run's statistics over a range of its steps (``python -m precision_rl span``): what results/calibration/NOTES.md quotes for a
run trained in parts, each part a range of steps.

Per run: the training reward per step (mean and sd over the range), its trailing mean over ``series.TRAIL_WINDOW``
steps (lowest and highest in the range, and the first step of the run at which it reaches the sanity pass mark
``checks.SANITY_REWARD``), the validation score at the last validated step in the range, and the medians over the
range of the step time and its phases, of the mismatch (mean |π − μ|, k3 KL), of the entropy and of the response
length; and for any logged metric asked for by name (``--metric``), its mean and median over the range.

Every column after the first is also read against the first, step by step, over the steps both logged in the range:
the correlation of their per-step training rewards and the mean and sd of the difference (this run minus the first).
Two runs of one seed that differ only in precision draw the same problems and sampling seeds, so their difference
is a paired comparison; its sd is what a single seed's arm difference has to stand out from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from precision_rl import metrics as M
from precision_rl.analysis.checks import SANITY_REWARD
from precision_rl.analysis.records import RunTable
from precision_rl.analysis.series import TRAIL_WINDOW, SeriesIndex, trailing_mean
from precision_rl.analysis.tables import first_val_set
from precision_rl.console import render_table
from precision_rl.errors import UserError


@dataclass(frozen=True)
class StepRange:
    """The steps ``first`` to ``last``, both included."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    def cut(self, series: pd.Series | None) -> pd.Series:
        """Return the values of ``series`` logged in the range (empty when ``series`` is None)."""
        if series is None:
            return pd.Series(dtype=float)
        return series[(series.index >= self.first) & (series.index <= self.last)]


def parse_range(text: str) -> StepRange:
    """Return the step range ``text`` names (``A-B``, 1 ≤ A ≤ B); a UserError for anything else."""
    first, dash, last = text.partition("-")
    if not dash or not first.strip().isdigit() or not last.strip().isdigit():
        raise UserError(f"bad step range {text!r}: write it as FIRST-LAST, e.g. 76-225")
    span = StepRange(int(first), int(last))
    if not 1 <= span.first <= span.last:
        raise UserError(f"bad step range {text!r}: need 1 <= FIRST <= LAST")
    return span


# The medians reported, in order: (row label, quantity). Step phases follow verl's timing_s/<phase> names.
_MEDIANS = (
    (f"{M.STEP_TIME_Q.label}: median", M.STEP_TIME_Q),
    *((f"{phase} (s): median", M.Quantity(phase, phase, (M.TIMING_PREFIX + phase,))) for phase in M.STEP_PHASES),
    *((f"{q.label}: median", q) for q in (M.MEAN_ABS_DIFF_Q, M.TOKEN_KL_K3_Q, M.ENTROPY_Q, M.RESPONSE_LENGTH_Q)),
)


def _number(value: float, fmt: str = ".4g") -> str:
    return "n/a" if value is None or not np.isfinite(value) else format(value, fmt)


def span_column(index: SeriesIndex, scale: str, run: str, experiment: str, span: StepRange) -> list[str]:
    """Return one run's statistics over ``span`` as text, in the order of ``span_labels``."""
    reward = index.quantity(scale, run, M.REWARD_Q)
    per_step = span.cut(reward)
    trailing = trailing_mean(reward) if reward is not None else pd.Series(dtype=float)
    trailing_in = span.cut(trailing)
    reached = trailing[(trailing >= SANITY_REWARD) & (trailing.index <= span.last)]
    logged = index.logged(scale, run)
    val_set = first_val_set(experiment, scale, logged)
    val_name = M.val_metric(logged, val_set) if val_set else None
    val = span.cut(index.get(scale, run, val_name) if val_name else None)
    column = [
        f"{int(per_step.index[0])}-{int(per_step.index[-1])} ({len(per_step)} steps)" if len(per_step) else "none",
        (f"{per_step.mean():.3f} (sd {per_step.std():.3f})" if len(per_step) > 1
         else _number(per_step.mean(), ".3f") if len(per_step) else "n/a"),
        f"{trailing_in.min():.3f} - {trailing_in.max():.3f}" if len(trailing_in) else "n/a",
        f"{trailing_in.iloc[-1]:.3f}" if len(trailing_in) else "n/a",
        str(int(reached.index[0])) if len(reached) else f"not by step {span.last}",
        f"{val.iloc[-1]:.3f} (step {int(val.index[-1])})" if len(val) else "n/a",
    ]
    for _, quantity in _MEDIANS:
        values = span.cut(index.quantity(scale, run, quantity))
        column.append(_number(float(values.median())) if len(values) else "n/a")
    return column


def metric_label(metric: str) -> str:
    """Return the row label of a metric asked for by name."""
    return f"{metric}: mean (median)"


def metric_cell(series: pd.Series | None, span: StepRange) -> str:
    """Return the mean and median of ``series`` over ``span`` as text ("n/a" when nothing is logged there)."""
    values = span.cut(series)
    return f"{_number(float(values.mean()))} ({_number(float(values.median()))})" if len(values) else "n/a"


def paired_column(reference: pd.Series, other: pd.Series) -> list[str]:
    """Return, over the steps both per-step series hold, the number of such steps, the correlation of the two and
    the mean (sd) of ``other - reference``, as text in the order of ``PAIRED_LABELS``."""
    both = pd.concat([reference, other], axis=1, join="inner").dropna()
    if len(both) < 2:
        return [str(len(both)), "n/a", "n/a"]
    first, second = both.iloc[:, 0].to_numpy(float), both.iloc[:, 1].to_numpy(float)
    difference = second - first
    flat = np.std(first) == 0 or np.std(second) == 0
    correlation = "n/a" if flat else f"{np.corrcoef(first, second)[0, 1]:.3f}"
    return [str(len(both)), correlation, f"{difference.mean():+.4f} (sd {difference.std(ddof=1):.4f})"]


PAIRED_LABELS = ("steps in common with the first column",
                 f"{M.REWARD_Q.label} per step against the first column: correlation",
                 f"{M.REWARD_Q.label} per step minus the first column's: mean (sd)")


def span_labels() -> list[str]:
    """Return the row labels of a span table, in the order ``span_column`` fills them."""
    return ["steps logged", f"{M.REWARD_Q.label} per step: mean (sd)",
            f"trailing mean of {TRAIL_WINDOW} steps: lowest - highest", "trailing mean at the range's last step",
            f"first step of the run with the trailing mean >= {SANITY_REWARD}", "validation score (last in range)",
            *(label for label, _ in _MEDIANS)]


def span_table(table: RunTable, span: StepRange, metrics: tuple[str, ...] = ()) -> str:
    """Return the statistics over ``span`` of every run of ``table``: one column per run, one row per statistic,
    then one row per metric named in ``metrics`` (a UserError for a name no chosen run logged)."""
    if table.runs.empty:
        raise UserError("no runs to summarize")
    index = SeriesIndex(table.metrics)
    runs = list(table.runs.itertuples(index=False))
    logged = frozenset().union(*(index.logged(str(r.scale), str(r.run)) for r in runs))
    unknown = [name for name in metrics if name not in logged]
    if unknown:
        close = sorted(n for n in logged if any(part in n for u in unknown for part in u.split("/") if part))[:8]
        raise UserError(f"no chosen run logged {', '.join(unknown)}"
                        + (f"; logged names that look alike: {', '.join(close)}" if close else ""))
    columns = [span_column(index, str(r.scale), str(r.run), str(r.experiment), span)
               + [metric_cell(index.get(str(r.scale), str(r.run), name), span) for name in metrics] for r in runs]
    labels = [*span_labels(), *(metric_label(name) for name in metrics)]
    if len(runs) > 1:
        per_step = [span.cut(index.quantity(str(r.scale), str(r.run), M.REWARD_Q)) for r in runs]
        for column, series in zip(columns[1:], per_step[1:], strict=True):
            column.extend(paired_column(per_step[0], series))
        columns[0].extend(["(the first column)"] * len(PAIRED_LABELS))
        labels = [*labels, *PAIRED_LABELS]
    rows = [[label, *(c[i] for c in columns)] for i, label in enumerate(labels)]
    headers = [f"steps {span}", *(f"{r.run} ({r.scale})" for r in runs)]
    return render_table(rows, headers, floatfmt="")
