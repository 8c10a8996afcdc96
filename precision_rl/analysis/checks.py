"""The paper's pass criteria as code (``make check``): each rule gives pass, fail or skip per run.

Rules
- ``sanity_reward``: a sanity-test run passes when its final training reward (trailing mean over the last
  ``series.TRAIL_WINDOW`` = 5 logged steps of ``critic/score/mean``) is ≥ 0.95: the paper's criterion of
  > 95 % training accuracy on the "perfectible" set (docs/sources.md#headline-numbers). The note gives the mean
  and sd of the per-step reward over the last ``PLATEAU_STEPS`` logged steps and places the run in the committed
  band of its configuration and arm (``runs.configuration_key``: experiment, scale, the spec's settings, extra
  overrides and tiny instrument), read from the committed runs (``results/logs/`` and ``results/reference/``), and
  names those runs.
- ``sanity_reward_over_seeds``: the verdict of a sanity configuration in one arm, over the seeds the experiment runs
  (``scales.<scale>.seeds``): mean, min and max of the runs' final rewards; it passes when every seed reaches 0.95,
  fails when one does not, and is skipped while seeds are missing. It uses only runs of one configuration and
  names them.
- ``mismatch_logged``: the run logged a training–inference mismatch metric at all.
- ``mismatch_start/<stat>``: the median of the first ``START_STEPS`` logged steps stays under the bound of the
  run's precision (every run: the paper quotes step-0 values for both dtypes).
- ``mismatch_throughout/<stat>``: the median over all steps stays under the bound (FP16/FP32 runs only: the
  paper shows their mismatch staying flat, while BF16's grows by design of the experiment).
- ``mismatch_extreme``: the largest |π − μ| of any step (signed max/min metrics) stays under the bound
  (FP16/FP32 only).
- ``fp16_vs_bf16/<stat>``: an FP16 run's starting mismatch is at least ``RATIO`` times smaller than the BF16 run's
  of the same configuration (the same seed where there is one; the paper's central claim, independent of model
  size); skipped where no BF16 run of the configuration exists.
A statistic a run did not log is skipped (e.g. verl's bypass mode logs no ``training/rollout_probs_diff_*``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl import metrics as M
from precision_rl.analysis.logs import RunTable
from precision_rl.analysis.records import UNKNOWN
from precision_rl.analysis.series import TRAIL_WINDOW, SeriesIndex, trailing_mean
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.profiles import QUICK
from precision_rl.config.scale import TINY
from precision_rl.console import render_table
from precision_rl.errors import UserError

SANITY_FAMILY = "sanity"
SANITY_REWARD = 0.95
# A quick-profile run stops long before the sanity criterion can be met: it is judged by the regression gate instead.
QUICK_NOT_JUDGED = ("the sanity criterion is the calibrated profile's (make run PROFILE=calibrated, or RESUME=1 "
                    "PROFILE=calibrated to continue this run); a quick run is judged by regression/band and "
                    "regression/repeat or regression/drift")
START_STEPS = 10
# The plateau a sanity run's note describes: the per-step reward over its last PLATEAU_STEPS logged steps (one
# checkpoint interval of the tiny profile), whose spread shows how much of the trailing mean is step-to-step noise.
PLATEAU_STEPS = 25


@dataclass(frozen=True)
class Bounds:
    """Upper bounds on one precision's mismatch statistics, with where they come from."""

    mean_abs_diff: float
    token_kl: float
    extreme: float | None
    source: str


# Paper numbers (docs/sources.md#headline-numbers, read off Fig. 3): at step 0, mean |π − μ| ≈ 0.004 (BF16) vs
# ≈ 0.0007 (FP16) in VeRL; token KL[μ‖π] ≈ 1e-3 (BF16) vs ≈ 1e-5 (FP16) in Oat, FP16 staying ≈ 1e-5 throughout;
# FP16's max/min of π − μ stay within about ±0.1 while collapsing runs reach ±1.
# Margins: 3x on probability differences (figure reading, other kernels and hardware) and 10x ≈ 3² on KL, which
# is quadratic in the probability error. The FP16 bounds (2.1e-3, 1e-4) stay below the paper's BF16 values
# (4e-3, 1e-3), so they still reject a BF16-level mismatch. FP32 has no paper number: its rounding is 2^13 times
# finer than FP16's, so FP16's bounds are a safe (loose) upper bound. A (train, infer) pair gets the bounds of its
# coarser dtype, whose rounding sets the mismatch.
BOUNDS = {
    "bf16": Bounds(mean_abs_diff=3 * 0.004, token_kl=10 * 1e-3, extreme=None,
                   source="paper BF16 step 0: mean|π−μ| 0.004, KL 1e-3"),
    "fp16": Bounds(mean_abs_diff=3 * 0.0007, token_kl=10 * 1e-5, extreme=2 * M.PAPER_FP16_PROBS_DIFF_EXTREME,
                   source="paper FP16: mean|π−μ| 0.0007, KL 1e-5, |π−μ| within ±0.1"),
}
BOUNDS["fp32"] = Bounds(BOUNDS["fp16"].mean_abs_diff, BOUNDS["fp16"].token_kl, BOUNDS["fp16"].extreme,
                        "FP16's bounds (no paper number; FP32 is finer)")
# The paper's BF16/FP16 ratios are ~5.7x (mean |π−μ|) and ~100x (KL); with the same 3x / 10x margins an FP16
# run must show at least 2x and 10x less mismatch than its BF16 twin.
RATIO = {"mean_abs_diff": 2.0, "token_kl": 10.0}
STATS = {"mean_abs_diff": M.MEAN_ABS_DIFF_Q, "token_kl": M.TOKEN_KL_Q}
# The regression gate: a run against the committed runs of its configuration and arm. A final reward may lie
# REWARD_MARGIN (or the band's own width, if wider) outside the committed min-max, since a new seed falls outside the
# range of three others half the time; a median mismatch may lie a factor MISMATCH_FACTOR outside (the same 3x
# margin as the bounds above; BF16's and FP16's mismatch differ by ~5x and ~100x). A committed run of the same seed
# on the same numerics (runs.numerics_key) must be repeated exactly: runs are deterministic there.
REWARD_MARGIN = 0.1
MISMATCH_FACTOR = 3.0
# The gate's mismatch statistics, each the median over a run's steps of a per-step value (the committed runs read up
# to the run's last step). The per-step median |log π − log μ| is robust from the first step. verl's per-step token
# means are heavy-tailed: over 30 sampling seeds of the 2-step test's batch on one CPU, k3 spans 123x in BF16 and 72x
# in FP16, while the median |log ratio| spans 1.4x and 1.7x (results/calibration/NOTES.md,
# "The mismatch across CPU kinds, measured"). Their
# median over steps is gated only once a run has HEAVY_TAIL_MIN_STEPS steps, so that one ill-conditioned token cannot
# decide it.
REGRESSION_STATS = {"abs_log_ratio_median": M.ABS_LOG_RATIO_MEDIAN_Q, **STATS}
HEAVY_TAILED = frozenset(STATS)
HEAVY_TAIL_MIN_STEPS = 5
# A run on other numerics than the committed run of its seed reproduces it when its per-step training reward stays
# closer to it than this fraction of the committed seeds' distance from each other (RMS over common steps). Measured
# across CPU vendors: per-step reward sd 0.010 between an Intel and an AMD run of one seed, 0.034 between seeds
# (results/calibration/NOTES.md, "Across CPU vendors").
DRIFT_FRACTION = 0.5
# A run's training reward and held-out accuracy, step by step, may lie this far outside the min–max of the committed
# seeds at that step: three times the per-step reward sd measured between runs of one seed on two CPU kinds (0.010,
# results/calibration/NOTES.md, "Across CPU vendors"), so that a rerun of a committed seed on any CPU stays inside.
BAND_TOLERANCE = 0.03


@dataclass(frozen=True)
class CheckResult:
    """One rule applied to one run."""

    run: str
    scale: str
    rule: str
    status: str  # pass | fail | skip
    value: float | None = None
    bound: str = ""
    note: str = ""


def bounds_for(train: str, infer: str) -> Bounds | None:
    """Return the mismatch bounds of a (train, infer) pair: those of its coarser dtype; None where the paper gives
    none (a quantized rollout)."""
    return BOUNDS.get(PrecisionArm(train, infer).coarsest)


def _compare(run, scale, rule, value, limit, upper: bool, what: str) -> CheckResult:
    ok = value <= limit if upper else value >= limit
    bound = f"{'<=' if upper else '>='} {limit:.3g}"
    return CheckResult(run, scale, rule, "pass" if ok else "fail", float(value), bound, what)


def final_reward(index: SeriesIndex, scale: str, run: str, at_step: int | None = None) -> tuple[float, int] | None:
    """Return a run's final training reward (trailing mean over ``TRAIL_WINDOW`` steps) and its step, or None; with
    ``at_step``, the run's reward up to that step (a longer committed run read where a shorter one ended)."""
    reward = index.quantity(scale, run, M.REWARD_Q)
    if reward is not None and at_step is not None:
        reward = reward[reward.index <= at_step]
    smooth = trailing_mean(reward) if reward is not None else None
    if smooth is None or smooth.empty:
        return None
    return float(smooth.iloc[-1]), int(smooth.index[-1])


def plateau_text(index: SeriesIndex, scale: str, run: str, steps: int = PLATEAU_STEPS) -> str:
    """Return the per-step training reward over a run's last ``steps`` logged steps as text, e.g. ``per-step mean
    0.971 (sd 0.009) over steps 201-225``; ``""`` where no reward was logged."""
    reward = index.quantity(scale, run, M.REWARD_Q)
    tail = reward.dropna().iloc[-steps:] if reward is not None else None
    if tail is None or tail.empty:
        return ""
    spread = f"sd {tail.std():.3f}" if len(tail) > 1 else "one step"
    return f"per-step mean {tail.mean():.3f} ({spread}) over steps {int(tail.index[0])}-{int(tail.index[-1])}"


@dataclass(frozen=True)
class Band:
    """The final rewards of the committed runs of one configuration and arm, by seed, and where they were read."""

    values: dict[int, float]
    sources: tuple[str, ...]

    def describe(self, value: float) -> str:
        """Return where ``value`` lies against the band, e.g. ``inside the committed band 0.951-0.975 (seeds ...)``,
        naming the runs it came from."""
        low, high = min(self.values.values()), max(self.values.values())
        where = "inside" if low <= value <= high else "below" if value < low else "above"
        seeds = ", ".join(f"{seed}: {v:.3f}" for seed, v in sorted(self.values.items()))
        return f"{where} the committed band {low:.3f}-{high:.3f} (seeds {seeds}; runs {', '.join(self.sources)})"


def short_source(source: str) -> str:
    """Return a run directory as a path relative to the repository where it lies inside it."""
    from precision_rl.paths import REPO_ROOT

    path = Path(source)
    return str(path.relative_to(REPO_ROOT)) if path.is_absolute() and path.is_relative_to(REPO_ROOT) else str(path)


def same_run(a: dict, b: dict) -> bool:
    """Return True when rows ``a`` and ``b`` are one run: its directory, or a published copy of it (same run name and
    run folder name, which holds the start time)."""
    return str(a["source"]) == str(b["source"]) or (
        str(a["run"]) == str(b["run"]) and Path(str(a["source"])).name == Path(str(b["source"])).name)


def same_configuration(a: dict, b: dict) -> bool:
    """Return True when runs ``a`` and ``b`` (rows of the runs table) are of one configuration at one scale and
    experiment (arm and seed aside); a run whose configuration is unknown matches none."""
    keys = ("scale", "experiment", "config")
    return str(a.get("config")) not in ("", "nan", UNKNOWN) and all(str(a.get(k)) == str(b.get(k)) for k in keys)


@dataclass(frozen=True)
class CommittedRuns:
    """The committed runs a run is compared with: one table per committed root and CPU kind
    (``logs.load_committed_tables``), each with its SeriesIndex. A run name is unique within such a table, not across
    them (the 2-step reference run of an arm and seed in ``results/reference/`` and its published full-length run in
    ``results/logs/`` share it, as do the reference runs of one arm on two CPU kinds), so they are never merged into
    one table, where one of them would be dropped."""

    tables: tuple[tuple[RunTable, SeriesIndex], ...] = ()

    @classmethod
    def of(cls, reference: CommittedRuns | RunTable | Sequence[RunTable] | None) -> CommittedRuns:
        """Return ``reference`` (one table, one per root, or none) as CommittedRuns, each table indexed once."""
        if isinstance(reference, CommittedRuns):
            return reference
        tables = [reference] if isinstance(reference, RunTable) else list(reference or ())
        return cls(tuple((t, SeriesIndex(t.metrics)) for t in tables if t is not None and not t.runs.empty))

    def peers(self, run: dict) -> list[tuple[dict, SeriesIndex]]:
        """Return the committed runs of ``run``'s configuration and arm (rows of their runs tables), each with its
        table's SeriesIndex: never the run itself or its published copy, and a run found in two roots once."""
        arm = (run["precision_train"], run["precision_infer"])
        found: list[tuple[dict, SeriesIndex]] = []
        for table, index in self.tables:
            for ref in table.runs.to_dict("records"):
                if same_configuration(run, ref) and (ref["precision_train"], ref["precision_infer"]) == arm \
                        and not same_run(run, ref) and not any(same_run(ref, seen) for seen, _ in found):
                    found.append((ref, index))
        return found


def reference_band(committed: CommittedRuns, run: dict) -> Band | None:
    """Return the band of ``run``'s configuration and arm among the ``committed`` runs (None when there is none; a run
    is never its own reference)."""
    values, sources = {}, []
    for ref, index in committed.peers(run):
        final = final_reward(index, str(ref["scale"]), str(ref["run"]))
        if final is not None:
            values[int(ref["seed"])] = final[0]
            sources.append(short_source(str(ref["source"])))
    return Band(values, tuple(sources)) if values else None


def expected_seeds(experiment: str, scale: str) -> tuple[int, ...] | None:
    """Return the seeds a registered experiment runs at ``scale`` (None for an experiment not in the registry)."""
    from precision_rl.config.registry import load_experiment

    try:
        return tuple(load_experiment(experiment, scale).seeds)
    except (UserError, ValueError):
        return None


def seed_verdict(index: SeriesIndex, runs: list[dict], scale: str, experiment: str, arm: PrecisionArm,
                 config: str = UNKNOWN) -> CheckResult:
    """Return the sanity criterion over the seeds of one configuration and arm, from ``runs`` (its runs, one per
    seed), naming the runs it used."""
    label = f"{experiment} {arm.label}"
    rule, bound = "sanity_reward_over_seeds", f">= {SANITY_REWARD} on every seed"
    finals = {int(r["seed"]): final_reward(index, scale, str(r["run"])) for r in runs}
    used = f"configuration {config}, runs {', '.join(short_source(str(r['source'])) for r in runs)}"
    if any(v is None for v in finals.values()):
        missing = sorted(seed for seed, v in finals.items() if v is None)
        return CheckResult(label, scale, rule, "fail", None, bound, f"no {M.REWARD} logged for seed(s) {missing}; "
                                                                     f"{used}")
    values = {seed: v[0] for seed, v in finals.items()}
    want = expected_seeds(experiment, scale) or tuple(sorted(values))
    per_seed = ", ".join(f"{seed}: {v:.3f}" for seed, v in sorted(values.items()))
    summary = (f"mean {np.mean(list(values.values())):.3f} [{min(values.values()):.3f}-{max(values.values()):.3f}] "
               f"over {len(values)} seed(s) ({per_seed})")
    below = [seed for seed, v in values.items() if v < SANITY_REWARD]
    absent = [seed for seed in want if seed not in values]
    if below:
        status, note = "fail", f"{summary}; seed(s) {sorted(below)} below {SANITY_REWARD}"
    elif absent:
        status, note = "skip", f"{summary}; no verdict before the experiment's other seed(s) {absent} have run"
    else:
        status, note = "pass", f"{summary}; every seed reaches {SANITY_REWARD}"
    return CheckResult(label, scale, rule, status, min(values.values()), bound, f"{note}; {used}")


def _differences(index: SeriesIndex, run: dict, ref_index: SeriesIndex, ref: dict) -> tuple[int, dict[str, tuple]]:
    """Return how many values ``run`` and the committed ``ref`` both logged, and per metric that differs its first
    differing step and largest absolute difference (NaN where only one side logged a value); times and memory are
    left out, and a metric ``run`` never logged differs from step one of ``ref``'s."""
    name, scale = str(run["run"]), str(run["scale"])
    compared, differ = 0, {}
    for metric in sorted(ref_index.logged(str(ref["scale"]), str(ref["run"]))):
        if metric.startswith(M.MEASURED_PREFIXES):
            continue
        mine = index.get(scale, name, metric, dropna=False)
        theirs = ref_index.get(str(ref["scale"]), str(ref["run"]), metric, dropna=False)
        if mine is None:
            differ[metric] = (int(theirs.index[0]), float("nan"))
            continue
        steps = theirs.index.intersection(mine.index)
        a, b = mine.reindex(steps).to_numpy(), theirs.reindex(steps).to_numpy()
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        compared += len(steps)
        if not same.all():
            gap = np.abs(a - b)[~same]
            differ[metric] = (int(steps[~same][0]), float(np.nanmax(gap)) if np.isfinite(gap).any() else float("nan"))
    return compared, differ


def _repeat(index: SeriesIndex, run: dict, ref_index: SeriesIndex, ref: dict) -> CheckResult:
    """Return whether ``run`` logged every value the committed run ``ref`` (same seed and numerics) logged."""
    name, scale = str(run["run"]), str(run["scale"])
    compared, differ = _differences(index, run, ref_index, ref)
    note = f"against {short_source(str(ref['source']))} (same seed and numerics), {compared} values"
    if differ:
        first = min(step for step, _ in differ.values())
        return CheckResult(name, scale, "regression/repeat", "fail", float(len(differ)), "0 metrics differ",
                           f"{note}: {len(differ)} metric(s) differ from step {first}, e.g. {', '.join(list(differ)[:3])}; "
                           "a change in the code or a package moved the numbers (republish the reference if it was "
                           "meant to)")
    return CheckResult(name, scale, "regression/repeat", "pass", 0.0, "0 metrics differ", note)


def _reward_rms(a: pd.Series, b: pd.Series, last_step: int) -> tuple[float, int]:
    """Return the root mean square of the per-step training-reward difference of two runs over their common steps up
    to ``last_step``, and the number of those steps (NaN, 0 where none)."""
    steps = a.index.intersection(b.index)
    steps = steps[steps <= last_step]
    if not len(steps):
        return float("nan"), 0
    return float(np.sqrt(np.mean((a.reindex(steps).to_numpy() - b.reindex(steps).to_numpy()) ** 2))), len(steps)


# Metrics whose largest difference a drift report names, where logged.
DRIFT_METRICS = (M.REWARD, M.ENTROPY, M.PROBS_DIFF_ABS_MEAN, M.TOKEN_KL_K3)


def _drift(index: SeriesIndex, run: dict, twin_index: SeriesIndex, twin: dict,
           peers: list[tuple[dict, SeriesIndex]]) -> CheckResult:
    """Return how far ``run`` drifts from ``twin`` (the committed run of its configuration, arm and seed on other
    numerics): bit for bit, or from which step and by how much, its per-step training reward's RMS difference set
    against that between the committed runs of other seeds. It passes when the drift is below ``DRIFT_FRACTION`` of
    that seed spread (a reproduction), fails when it is not (another draw), and is skipped without two committed
    seeds to measure the spread by."""
    name, scale, rule = str(run["run"]), str(run["scale"]), "regression/drift"
    compared, differ = _differences(index, run, twin_index, twin)
    against = f"against {short_source(str(twin['source']))} (same seed, other numerics)"
    if not differ:
        return CheckResult(name, scale, rule, "pass", 0.0, "bit for bit", f"{against}: repeats it bit for bit, "
                           f"{compared} values")
    first = min(step for step, _ in differ.values())
    largest = ", ".join(f"{metric} {differ[metric][1]:.3g}" for metric in DRIFT_METRICS if metric in differ)
    mine, theirs = index.get(scale, name, M.REWARD), twin_index.get(str(twin["scale"]), str(twin["run"]), M.REWARD)
    last = int(mine.index.max()) if mine is not None and len(mine) else 0
    drift, steps = _reward_rms(mine, theirs, last) if mine is not None and theirs is not None else (float("nan"), 0)
    rewards = {int(r["seed"]): s for r, ref_index in peers
               if (s := ref_index.get(str(r["scale"]), str(r["run"]), M.REWARD)) is not None}
    pairs = [_reward_rms(rewards[a], rewards[b], last)[0] for i, a in enumerate(sorted(rewards))
             for b in sorted(rewards)[i + 1:]]
    pairs = [p for p in pairs if np.isfinite(p)]
    note = (f"{against}: {len(differ)} metric(s) differ from step {first} on, largest |difference| {largest or '-'}; "
            f"training reward RMS difference {drift:.3g} over {steps} step(s)")
    if not pairs or not np.isfinite(drift):
        return CheckResult(name, scale, rule, "skip", drift, f"< {DRIFT_FRACTION:g} x seed spread",
                           f"{note}; no two committed seeds of the configuration to measure the seed spread by")
    spread = float(np.mean(pairs))
    ok = drift < DRIFT_FRACTION * spread
    verdict = "a reproduction that drifted" if ok else "as far from it as another seed is: another draw"
    return CheckResult(name, scale, rule, "pass" if ok else "fail", drift, f"< {DRIFT_FRACTION * spread:.3g}",
                       f"{note}, against {spread:.3g} between the committed seeds ({len(rewards)}): {verdict}")


def regression_checks(index: SeriesIndex, run: dict, committed: CommittedRuns) -> list[CheckResult]:
    """Return the regression gate's results for ``run``: its final reward and median mismatch against the band of the
    ``committed`` runs of its configuration and arm, and an exact repeat of a committed run of the same seed and
    numerics; nothing where no committed run of the configuration exists."""
    peers = committed.peers(run)
    if not peers:
        return []
    name, scale = str(run["run"]), str(run["scale"])
    used = f"committed runs {', '.join(short_source(str(r['source'])) for r, _ in peers)}"
    out = []
    final = final_reward(index, scale, name)
    finals = [f[0] for r, ref_index in peers
              if (f := final_reward(ref_index, str(r["scale"]), str(r["run"]), final[1] if final else None)) is not None
              and final is not None and f[1] == final[1]]
    if final is not None and finals:
        low, high = min(finals), max(finals)
        margin = max(REWARD_MARGIN, high - low)
        ok = low - margin <= final[0] <= high + margin
        out.append(CheckResult(name, scale, "regression/reward", "pass" if ok else "fail", final[0],
                               f"in {low - margin:.3f}-{high + margin:.3f}",
                               f"at step {final[1]}: committed band {low:.3f}-{high:.3f} ± {margin:.2f}; {used}"))
    band = _step_band(index, run, peers)
    if band is not None:
        out.append(band)
    for stat, quantity in REGRESSION_STATS.items():
        mine = index.quantity(scale, name, quantity)
        last = int(mine.index.max()) if mine is not None and not mine.empty else 0
        medians = [float(s[s.index <= last].median()) for r, ref_index in peers
                   if (s := ref_index.quantity(str(r["scale"]), str(r["run"]), quantity)) is not None
                   and not s[s.index <= last].empty]
        if mine is None or mine.empty or not medians or min(medians) <= 0:
            continue
        if stat in HEAVY_TAILED and len(mine.dropna()) < HEAVY_TAIL_MIN_STEPS:
            out.append(CheckResult(name, scale, f"regression/{stat}", "skip", float(mine.median()),
                                   f">= {HEAVY_TAIL_MIN_STEPS} steps", f"a per-step token mean over "
                                   f"{len(mine.dropna())} step(s): one ill-conditioned token moves it by 10x or "
                                   "more, so the gate reads the median |log ratio| instead"))
            continue
        low, high = min(medians) / MISMATCH_FACTOR, max(medians) * MISMATCH_FACTOR
        value = float(mine.median())
        out.append(CheckResult(name, scale, f"regression/{stat}", "pass" if low <= value <= high else "fail", value,
                               f"in {low:.3g}-{high:.3g}", f"median over steps; committed medians "
                               f"{min(medians):.3g}-{max(medians):.3g} within {MISMATCH_FACTOR:g}x; {used}"))
    known = str(run.get("numerics")) not in ("", "nan", UNKNOWN)
    same_seed = [(r, ref_index) for r, ref_index in peers if int(r["seed"]) == int(run["seed"])]
    twins = [(r, i) for r, i in same_seed if known and str(r.get("numerics")) == str(run.get("numerics"))]
    if twins:
        out.append(_repeat(index, run, twins[0][1], twins[0][0]))
    elif same_seed:
        out.append(_drift(index, run, same_seed[0][1], same_seed[0][0], peers))
    return out


def _points_outside(mine: dict[str, pd.Series], bands: dict[str, pd.DataFrame]) -> tuple[int, list[str]]:
    """Return how many of the points in ``mine`` (per metric, by step) have a band at their step in ``bands`` (per
    metric, one column per committed run), and a description of each that lies beyond the band's min–max widened by
    ``BAND_TOLERANCE``."""
    checked, outside = 0, []
    for metric, series in mine.items():
        table = bands.get(metric)
        if table is None:
            continue
        for step, value in series.items():
            if step not in table.index or table.loc[step].isna().all():
                continue
            low, high = float(table.loc[step].min()), float(table.loc[step].max())
            checked += 1
            if value < low - BAND_TOLERANCE or value > high + BAND_TOLERANCE:
                side, gap = ("below", low - value) if value < low else ("above", value - high)
                outside.append(f"{'reward' if metric == M.REWARD else metric} step {step}: {value:.3f} {side} "
                               f"{low:.3f}-{high:.3f} by {gap:.3f}")
    return checked, outside


def _step_band(index: SeriesIndex, run: dict, peers: list[tuple[dict, SeriesIndex]]) -> CheckResult | None:
    """Return how the run's training reward, step by step, and its held-out points lie in the band of the committed
    runs of its configuration and arm at the same steps: their min–max widened by ``BAND_TOLERANCE``. The run passes
    when no more of its points fall outside than the committed seeds' own, each against the others' band (so a new
    seed, another draw, passes as often as a committed one would); with fewer than two committed seeds every point
    of a rerun of that seed must lie inside, and another seed is not judged (one curve is no band: "skip", with how
    far the run lies from it). None where no committed run logged any of the run's steps."""
    name, scale = str(run["run"]), str(run["scale"])
    logged = index.logged(scale, name)
    metrics = [M.REWARD] + [M.val_metric(logged, source) for source in M.val_data_sources(logged)]
    mine = {m: s for m in metrics if (s := index.get(scale, name, m)) is not None}
    # One entry per committed run (a seed may have one per CPU kind, in the reference), keyed by (seed, source).
    series = {(int(r["seed"]), str(r["source"])): found for r, ref_index in peers
              if (found := {m: s for m in metrics if (s := ref_index.get(str(r["scale"]), str(r["run"]), m)) is not None})}

    def bands(keys) -> dict[str, pd.DataFrame]:
        return {m: pd.concat(cols, axis=1) for m in metrics
                if (cols := [series[key][m] for key in keys if m in series[key]])}

    checked, outside = _points_outside(mine, bands(series))
    if not checked:
        return None
    own = []
    for key in series:
        others = [k for k in series if k[0] != key[0]]
        if not others:
            continue
        own_checked, own_outside = _points_outside({m: s.reindex(s.index.intersection(mine[m].index)).dropna()
                                                    for m, s in series[key].items() if m in mine}, bands(others))
        if own_checked:
            own.append(len(own_outside) / own_checked)
    allowed = max(own) if own else 0.0
    seeds = sorted({seed for seed, _ in series})
    note = (f"{len(outside)} of {checked} point(s) outside the committed seeds {', '.join(map(str, seeds))} "
            f"at the same steps (min-max widened by {BAND_TOLERANCE:g})")
    if own:
        note += f"; the committed seeds, each against the others, up to {allowed:.0%}"
    listed = f": {'; '.join(outside[:5])}{'; ...' if len(outside) > 5 else ''}" if outside else ""
    if len(seeds) < 2 and int(run["seed"]) not in seeds:
        return CheckResult(name, scale, "regression/band", "skip", float(len(outside)), "two committed seeds",
                           f"no band: one committed seed ({seeds[0]}), and seed {int(run['seed'])} is another draw "
                           f"({len(outside)} of {checked} point(s) off its curve by more than {BAND_TOLERANCE:g}); "
                           "publish a second seed for a band")
    ok = len(outside) / checked <= allowed
    return CheckResult(name, scale, "regression/band", "pass" if ok else "fail", float(len(outside)),
                       f"<= {allowed:.0%} of points outside", note + listed)


def _start(series: pd.Series) -> float:
    return float(series.iloc[:START_STEPS].median())


def is_sanity(experiment: str) -> bool:
    """Return True for an experiment of the sanity family, which the reward rules judge."""
    return str(experiment).split("/")[0] == SANITY_FAMILY


def check_run(index: SeriesIndex, run: dict, committed: CommittedRuns | None = None) -> list[CheckResult]:
    """Return the single-run rules' results for ``run`` (a row of the runs table as a dict); a sanity run's reward is
    placed in the band of the ``committed`` runs of its configuration and arm."""
    name, scale = str(run["run"]), str(run["scale"])
    train, infer = str(run["precision_train"]), str(run["precision_infer"])
    out: list[CheckResult] = []
    if is_sanity(run["experiment"]) and str(run.get("profile")) == QUICK:
        out.append(CheckResult(name, scale, "sanity_reward", "skip", None, f">= {SANITY_REWARD}",
                               QUICK_NOT_JUDGED))
    elif is_sanity(run["experiment"]):
        final = final_reward(index, scale, name)
        if final is None:
            out.append(CheckResult(name, scale, "sanity_reward", "fail", None, f">= {SANITY_REWARD}",
                                   f"no {M.REWARD} logged"))
        else:
            band = reference_band(committed or CommittedRuns(), run)
            where = band.describe(final[0]) if band else f"no committed run of this configuration ({run['config']}) " \
                "and arm to compare with"
            out.append(_compare(name, scale, "sanity_reward", final[0], SANITY_REWARD, False,
                                f"final trailing mean over {TRAIL_WINDOW} steps at step {final[1]}; "
                                f"{plateau_text(index, scale, name)}; {where}"))
    series = {stat: index.quantity(scale, name, q) for stat, q in STATS.items()}
    logged = {stat: s for stat, s in series.items() if s is not None and not s.empty}
    out.append(CheckResult(name, scale, "mismatch_logged", "pass" if logged else "fail", None, "",
                           ", ".join(logged) if logged else "neither mean |π−μ| nor token KL was logged"))
    bounds = bounds_for(train, infer)
    if bounds is None:
        out.append(CheckResult(name, scale, "mismatch_bounds", "skip",
                               note=f"the paper bounds no {infer} rollout's mismatch: the ladder measures it"))
        return out
    steady = PrecisionArm(train, infer).coarsest != "bf16"
    for stat in STATS:
        limit = getattr(bounds, stat)
        if stat not in logged:
            out.append(CheckResult(name, scale, f"mismatch_start/{stat}", "skip", note="not logged"))
            continue
        s = logged[stat]
        out.append(_compare(name, scale, f"mismatch_start/{stat}", _start(s), limit, True,
                            f"median of the first {min(START_STEPS, len(s))} steps; {bounds.source}"))
        if steady:
            out.append(_compare(name, scale, f"mismatch_throughout/{stat}", float(s.median()), limit, True,
                                f"median over {len(s)} steps; {bounds.source}"))
    if steady and bounds.extreme is not None:
        hi = index.quantity(scale, name, M.PROBS_DIFF_MAX_Q)
        lo = index.quantity(scale, name, M.PROBS_DIFF_MIN_Q)
        parts = [s.abs().max() for s in (hi, lo) if s is not None and not s.empty]
        if parts:
            out.append(_compare(name, scale, "mismatch_extreme", max(parts), bounds.extreme, True,
                                f"largest |π−μ| over all steps ({M.PROBS_DIFF_MAX}, {M.PROBS_DIFF_MIN})"))
        else:
            out.append(CheckResult(name, scale, "mismatch_extreme", "skip", note="signed max/min not logged"))
    return out


def check_pair(index: SeriesIndex, fp16: dict, bf16: dict) -> list[CheckResult]:
    """Return the ``fp16_vs_bf16`` results of an FP16 run against the BF16 run of the same experiment."""
    name, scale = str(fp16["run"]), str(fp16["scale"])
    out = []
    for stat, quantity in STATS.items():
        a = index.quantity(scale, name, quantity)
        b = index.quantity(scale, str(bf16["run"]), quantity)
        rule = f"fp16_vs_bf16/{stat}"
        if a is None or b is None or a.empty or b.empty:
            out.append(CheckResult(name, scale, rule, "skip", note="not logged by both runs"))
            continue
        low, high = _start(a), _start(b)
        if high <= 0:
            out.append(CheckResult(name, scale, rule, "fail", None, f">= {RATIO[stat]}",
                                   f"the BF16 run's starting value is <= 0 ({bf16['run']})"))
            continue
        ratio = high / low if low > 0 else np.inf
        out.append(_compare(name, scale, rule, ratio, RATIO[stat], False,
                            f"BF16/FP16 ratio of starting medians vs {short_source(str(bf16['source']))}"))
    return out


def select_runs(runs: pd.DataFrame, patterns: list[str] | None, scale: str | None = None,
                profile: str | None = None) -> pd.DataFrame:
    """Return the runs matching any of ``patterns`` (run name, experiment name or glob, or run directory).

    ``scale`` (paper/tiny) and ``profile`` (a tiny profile: ``config/profiles.py``) narrow the choice; a pattern that
    matches nothing is a UserError.
    """
    chosen = runs if scale in (None, "", "auto", "all") else runs[runs["scale"].astype(str) == scale]
    if profile:
        chosen = chosen[(chosen["scale"].astype(str) == TINY) & (chosen["profile"].astype(str) == profile)]
    if not patterns:
        if chosen.empty:
            raise UserError("no runs to check" + (f" at scale {scale}" if scale not in (None, "", "auto", "all")
                                                  else "") + (f" in the {profile} profile" if profile else "")
                            + ": run an experiment first (see `make help`)")
        return chosen
    keep = np.zeros(len(chosen), dtype=bool)
    sources = [str(Path(s).resolve()) if isinstance(s, str) and s else "" for s in chosen["source"]]
    for pattern in patterns:
        resolved = str(Path(pattern).resolve()) if Path(pattern).exists() else None
        hits = np.array([fnmatch.fnmatchcase(str(r), pattern) or fnmatch.fnmatchcase(str(e), pattern)
                         or (resolved is not None and s == resolved)
                         for r, e, s in zip(chosen["run"], chosen["experiment"], sources, strict=True)], dtype=bool)
        if not hits.any():
            names = ", ".join(sorted(map(str, chosen["run"]))[:8]) or "none"
            raise UserError(f"no run matches {pattern!r} (runs: {names})")
        keep |= hits
    return chosen[keep]


def run_checks(table: RunTable, patterns: list[str] | None = None, scale: str | None = None,
               reference: CommittedRuns | RunTable | Sequence[RunTable] | None = None,
               profile: str | None = None) -> list[CheckResult]:
    """Return every rule's result for the selected runs, then the verdict over seeds of each selected sanity
    configuration and arm; pairs and verdicts use only runs of the same configuration in ``table``, and each run is
    placed in the band of the committed ``reference`` runs of its configuration (one table per committed root).
    ``profile`` keeps only the tiny runs of that profile."""
    index = SeriesIndex(table.metrics)
    selected = select_runs(table.runs, patterns, scale, profile)
    everyone = table.runs.to_dict("records")
    results: list[CheckResult] = []
    committed = CommittedRuns.of(reference)
    for run in selected.to_dict("records"):
        results += check_run(index, run, committed)
        results += regression_checks(index, run, committed)
        if run["precision_train"] == run["precision_infer"] == "fp16":
            twins = [r for r in everyone if same_configuration(run, r)
                     and r["precision_train"] == r["precision_infer"] == "bf16"]
            twins.sort(key=lambda r: (r["seed"] != run["seed"], r["seed"]))
            if twins:
                results += check_pair(index, run, twins[0])
            else:
                results.append(CheckResult(str(run["run"]), str(run["scale"]), "fp16_vs_bf16", "skip",
                                           note=f"no BF16 run of this configuration ({run['config']})"))
    groups: dict[tuple, list[dict]] = {}
    for r in selected.to_dict("records"):
        if is_sanity(r["experiment"]) and str(r.get("profile")) != QUICK:
            key = (str(r["scale"]), str(r["experiment"]), str(r["config"]), str(r["precision_train"]),
                   str(r["precision_infer"]))
            groups[key] = [m for m in everyone if str(m.get("profile")) != QUICK
                           and (same_configuration(r, m) or m["source"] == r["source"])
                           and (str(m["precision_train"]), str(m["precision_infer"])) == key[3:]]
    for (sc, experiment, config, train, infer), members in sorted(groups.items()):
        results.append(seed_verdict(index, members, sc, experiment, PrecisionArm(train, infer), config))
    return results


def format_results(results: list[CheckResult]) -> str:
    """Return the results as an aligned text table."""
    rows = [[r.scale, r.run, r.rule, r.status.upper(), "" if r.value is None else f"{r.value:.4g}", r.bound, r.note]
            for r in results]
    return render_table(rows, ["scale", "run", "rule", "status", "value", "bound", "note"], floatfmt="")


def failures(results: list[CheckResult]) -> list[CheckResult]:
    """Return the failed results."""
    return [r for r in results if r.status == "fail"]
