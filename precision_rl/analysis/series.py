"""Per-run metric series from the tidy table, and the smoothing and summary statistics figures, tables and checks
share (one definition each: EMA, trailing mean, peak, collapse, seed aggregation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from precision_rl.metrics import Quantity, resolve

# Smoothing of training curves: an EMA whose span is 5 % of the curve's points (the paper does not give its
# smoothing weight; 5 % gives its look at 2,000 steps and still follows a 40-step tiny run).
EMA_SPAN_FRACTION = 0.05
# Peak, final value and collapse use a trailing mean over this many logged steps: short enough to place a
# collapse within a few steps, long enough to damp one lucky batch (512 responses per step at paper scale).
TRAIL_WINDOW = 5


class SeriesIndex:
    """Fast lookup of one run's metric as a step-indexed series, built once from the (sorted) tidy table."""

    def __init__(self, metrics: pd.DataFrame):
        self._steps = metrics["step"].to_numpy()
        self._values = metrics["value"].to_numpy()
        self._slices: dict[tuple[str, str], dict[str, slice]] = {}
        if not len(metrics):
            return
        keys = [metrics[c].cat.codes.to_numpy() if hasattr(metrics[c], "cat") else pd.factorize(metrics[c])[0]
                for c in ("scale", "run", "metric")]
        change = np.zeros(len(metrics), dtype=bool)
        change[0] = True
        for k in keys:
            change[1:] |= k[1:] != k[:-1]
        starts = np.flatnonzero(change)
        ends = np.append(starts[1:], len(metrics))
        scale, run, metric = (metrics[c].to_numpy() for c in ("scale", "run", "metric"))
        for start, end in zip(starts, ends, strict=True):
            self._slices.setdefault((str(scale[start]), str(run[start])), {})[str(metric[start])] = slice(start, end)
        for (sc, rn), per_metric in self._slices.items():
            for name, sl in per_metric.items():
                if np.any(np.diff(self._steps[sl]) <= 0):
                    raise ValueError(f"metrics table is not sorted by step for {sc}/{rn}/{name}")

    def logged(self, scale: str, run: str) -> frozenset[str]:
        """Return the metric names run ``run`` at ``scale`` logged."""
        return frozenset(self._slices.get((scale, run), {}))

    def get(self, scale: str, run: str, metric: str, dropna: bool = True) -> pd.Series | None:
        """Return the run's ``metric`` as a float series indexed by step (None when not logged)."""
        sl = self._slices.get((scale, run), {}).get(metric)
        if sl is None:
            return None
        series = pd.Series(self._values[sl], index=pd.Index(self._steps[sl], name="step"), name=metric)
        return series.dropna() if dropna else series

    def quantity(self, scale: str, run: str, quantity: Quantity, dropna: bool = True) -> pd.Series | None:
        """Return the run's ``quantity`` (its first logged candidate metric), or None."""
        name = resolve(quantity, self.logged(scale, run))
        return None if name is None else self.get(scale, run, name, dropna)


def ema_span(n_points: int) -> float:
    """Return the EMA span used for a curve of ``n_points`` points."""
    return max(1.0, EMA_SPAN_FRACTION * n_points)


def ema(series: pd.Series, span: float | None = None) -> pd.Series:
    """Return the exponential moving average of ``series`` (NaN skipped), span from ``ema_span`` by default."""
    if series.empty:
        return series
    return series.ewm(span=span or ema_span(len(series)), ignore_na=True).mean()


def trailing_mean(series: pd.Series, window: int = TRAIL_WINDOW) -> pd.Series:
    """Return the trailing mean of ``series`` over ``window`` logged steps (fewer at the very start)."""
    series = series.dropna()
    return series.rolling(window, min_periods=min(window, max(1, len(series)))).mean().dropna()


@dataclass(frozen=True)
class RewardSummary:
    """Peak, final value and collapse of a training-reward curve (trailing mean over TRAIL_WINDOW steps)."""

    peak: float
    peak_step: int
    final: float
    last_step: int
    collapse_step: int | None


def collapse_step(smoothed: pd.Series, peak: float | None = None) -> int | None:
    """Return the first step after the peak from which ``smoothed`` stays below half its peak, or None."""
    if smoothed.empty:
        return None
    values = smoothed.to_numpy()
    peak_pos = int(np.argmax(values))
    peak = values[peak_pos] if peak is None else peak
    if not peak > 0:
        return None
    below = values < peak / 2
    below[: peak_pos + 1] = False
    if not below[-1]:
        return None
    above = np.flatnonzero(~below)
    first = above[-1] + 1
    return int(smoothed.index[first])


def summarize_reward(series: pd.Series | None) -> RewardSummary | None:
    """Return the reward summary of ``series`` (None when it has no finite values)."""
    if series is None:
        return None
    smoothed = trailing_mean(series)
    if smoothed.empty:
        return None
    peak_pos = int(np.argmax(smoothed.to_numpy()))
    return RewardSummary(peak=float(smoothed.iloc[peak_pos]), peak_step=int(smoothed.index[peak_pos]),
                         final=float(smoothed.iloc[-1]), last_step=int(smoothed.index[-1]),
                         collapse_step=collapse_step(smoothed))


@dataclass(frozen=True)
class SeedBand:
    """A curve over seeds: the mean and the min–max band at each step, and how many seeds it has."""

    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_seeds: int


def aggregate(curves: list[pd.Series]) -> SeedBand | None:
    """Return the mean and min–max band of ``curves`` (one per seed) on the union of their steps."""
    curves = [c for c in curves if c is not None and not c.empty]
    if not curves:
        return None
    if len(curves) == 1:
        c = curves[0]
        v = c.to_numpy(dtype=float)
        return SeedBand(c.index.to_numpy(), v, v, v, 1)
    frame = pd.concat([c.rename(i) for i, c in enumerate(curves)], axis=1).sort_index()
    return SeedBand(frame.index.to_numpy(), frame.mean(axis=1).to_numpy(), frame.min(axis=1).to_numpy(),
                    frame.max(axis=1).to_numpy(), len(curves))
