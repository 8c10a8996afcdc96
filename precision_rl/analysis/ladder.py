"""The mismatch ladder's dose–response: what each run of the ``ladder`` panel measured of its own mismatch (the
per-sequence KL[μ‖π] it logged) beside how it trained, and the figure and verdict drawn from them.

A rung is one (experiment, precision arm) of the panel: the FP16 trainer with its rollout in one format. Its dose is
the median over a run's steps of ``mismatch/sequence_kl_mean``; its outcome the final training reward (trailing
mean), the last held-out accuracy and the largest |π − μ| of the run. A rung degrades when its band of final rewards
over seeds lies wholly below the first rung's (the rollout in the trainer's own format): bands that touch overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from precision_rl import metrics as M
from precision_rl.analysis import plotting as P
from precision_rl.analysis.panel_notes import ArmRuns, finish_panel, legend_label
from precision_rl.analysis.series import trailing_mean
from precision_rl.formats import MANTISSA_BITS

LADDER_PANEL = "ladder"
# The dose axis (nats per sequence): from below the tiny FP16 rollout's level to past the paper's BF16 level.
DOSE_AXIS, DOSE_TICKS = (1e-6, 30.0), (1e-6, 1e-4, 1e-2, 1.0)


@dataclass(frozen=True)
class RunDose:
    """One run of a rung: its seed, the mismatch it carried and how it trained (None where not logged)."""

    run: str
    sequence_kl: float | None  # median over steps of the per-sequence KL[μ‖π]
    final_reward: float | None  # trailing mean of the training reward at the last step
    heldout: float | None  # the last held-out accuracy
    max_abs_diff: float | None  # the largest |π − μ| over the run's steps


@dataclass(frozen=True)
class Rung:
    """A rung of the ladder: its label, its rollout format and the runs (one per seed) drawn for it."""

    label: str
    infer: str
    runs: tuple[RunDose, ...]

    def values(self, field: str) -> list[float]:
        """Return the runs' finite values of ``field``."""
        return [v for r in self.runs if (v := getattr(r, field)) is not None and np.isfinite(v)]

    def band(self, field: str) -> tuple[float, float, float] | None:
        """Return (mean, min, max) of ``field`` over the runs, or None without values."""
        values = self.values(field)
        return (float(np.mean(values)), min(values), max(values)) if values else None


def summarize_run(run: str, reward: pd.Series | None, heldout: pd.Series | None, sequence_kl: pd.Series | None,
                  max_abs_diff: pd.Series | None) -> RunDose:
    """Return the dose and outcome of one run from its series (any may be None or empty)."""
    def has(s):
        return s is not None and not s.dropna().empty

    return RunDose(run, float(sequence_kl.dropna().median()) if has(sequence_kl) else None,
                   float(trailing_mean(reward.dropna()).iloc[-1]) if has(reward) else None,
                   float(heldout.dropna().iloc[-1]) if has(heldout) else None,
                   float(max_abs_diff.dropna().max()) if has(max_abs_diff) else None)


def verdict(rungs: list[Rung]) -> str:
    """Return the ladder's verdict by the bands rule, against the first rung (the rollout in the trainer's format):
    "degrades from X nats per sequence (rung)" at the smallest dose whose reward band lies wholly below the first
    rung's, else "no degradation resolved up to X nats per sequence" at the largest dose measured."""
    if not rungs or rungs[0].band("final_reward") is None:
        return "no verdict: the rung in the trainer's own format has no finished run"
    reference = rungs[0].band("final_reward")
    measured = [(r.band("sequence_kl"), r) for r in rungs[1:] if r.band("sequence_kl") and r.band("final_reward")]
    if not measured:
        return "no verdict: no other rung has a finished run"
    for dose, rung in sorted(measured, key=lambda m: m[0][0]):
        if rung.band("final_reward")[2] < reference[1] and len(rung.runs) > 1 and len(rungs[0].runs) > 1:
            return f"degrades from {dose[0]:.3g} nats per sequence ({rung.label})"
    largest = max(measured, key=lambda m: m[0][0])
    thin = [r.label for _, r in measured if len(r.runs) < 2] + ([rungs[0].label] if len(rungs[0].runs) < 2 else [])
    return (f"no degradation resolved up to {largest[0][0]:.3g} nats per sequence ({largest[1].label})"
            + (f"; one seed only: {', '.join(thin)} (no band)" if thin else ""))


def rung_order(infer: str) -> float:
    """Return a sort key putting rungs from the finest rollout format to the coarsest."""
    return -MANTISSA_BITS.get(infer, 0)


def _last(curves: list[pd.Series]) -> pd.Series | None:
    return curves[0] if curves else None


def ladder_arms(data, scale: str) -> list[ArmRuns]:
    """Return the (experiment, arm) pairs of the ``ladder`` panel at ``scale`` with their runs, finest rollout format
    first (``data`` is a ``figures.FigureData``)."""
    arms = [data.arm_runs(scale, spec, arm, P.precision_label(arm.train, arm.infer))
            for spec in data.specs(scale).values() for arm in spec.panel_arms(LADDER_PANEL)]
    return sorted(arms, key=lambda a: (rung_order(a.arm.infer), a.label))


def ladder_rungs(data, scale: str, arms: list[ArmRuns] | None = None) -> list[Rung]:
    """Return the rungs of the ``ladder`` panel at ``scale`` (``ladder_arms``), each with its finished runs' doses and
    outcomes."""
    rungs = []
    for arm in ladder_arms(data, scale) if arms is None else arms:
        val = arm.spec.data.val
        doses = [summarize_run(run, _last(data.curves(scale, [run], M.REWARD_Q)),
                               _last(data.val_curves(scale, [run], val[0])[0]) if val else None,
                               _last(data.curves(scale, [run], M.SEQUENCE_KL_K3_Q)),
                               _last(data.curves(scale, [run], M.PROBS_DIFF_ABS_MAX_Q))) for run in arm.finished]
        rungs.append(Rung(arm.label, arm.arm.infer, tuple(doses)))
    return rungs


OUTCOMES = (("final_reward", "Final training reward (trailing mean)"), ("heldout", "Held-out accuracy (last)"),
            ("max_abs_diff", "Largest |π − μ| of the run"))


def build_mismatch_ladder(data, scale: str):
    """Return the dose–response figure: each outcome against the per-sequence KL[μ‖π] the run logged (log x, one
    point per run, a rung's min–max as bars, the paper's FP16 and BF16 levels as vertical lines), and the rungs'
    reward curves; the verdict under the legend, and in each panel why a rung drew nothing."""
    arms = ladder_arms(data, scale)
    rungs = ladder_rungs(data, scale, arms)
    fig, axes = P.new_figure(1, len(OUTCOMES) + 1, panel_size=(3.0, 2.4))
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(rungs), 1)))
    for ax, (field, title) in zip(axes[0], OUTCOMES, strict=False):
        ax.set_title(title)
        ax.set_xscale("log")
        ax.set_xlim(*DOSE_AXIS)
        ax.set_xticks(DOSE_TICKS)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("KL[μ‖π] per sequence (k3, median over steps)")
        seeds = []
        for rung, color in zip(rungs, colors, strict=True):
            points = [(r.sequence_kl, getattr(r, field)) for r in rung.runs
                      if r.sequence_kl is not None and r.sequence_kl > 0 and getattr(r, field) is not None]
            seeds.append(len(points))
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            ax.scatter(xs, ys, color=color, s=14, zorder=3)
            ax.errorbar([np.mean(xs)], [np.mean(ys)], xerr=[[np.mean(xs) - min(xs)], [max(xs) - np.mean(xs)]],
                        yerr=[[np.mean(ys) - min(ys)], [max(ys) - np.mean(ys)]], color=color, linewidth=1,
                        capsize=2, zorder=2)
        for name, level in M.PAPER_SEQUENCE_KL.items():
            ax.axvline(level, color="0.4", linestyle=":" if name == "fp16" else "--", linewidth=1)
            ax.annotate(f"paper {P.PRECISION_NAMES[name]}", (level, 1.0), xycoords=("data", "axes fraction"),
                        fontsize=6, rotation=90, va="top", ha="right", color="0.3")
        finish_panel(ax, arms, seeds, scale, f"{M.SEQUENCE_KL_K3} and {title.lower()}", legend_has_seeds=True)
    curves_ax = axes[0, -1]
    curves_ax.set_title("Training reward per rung")
    curves_ax.set_xlabel("Training steps")
    seeds = [P.draw_training_curve(curves_ax, data.curves(scale, list(arm.finished), M.REWARD_Q), color, arm.label)
             for arm, color in zip(arms, colors, strict=True)]
    finish_panel(curves_ax, arms, seeds, scale, M.REWARD, legend_has_seeds=True)
    P.figure_legend(fig, {legend_label(arm): (color, "-") for arm, color, n in zip(arms, colors, seeds, strict=True)
                          if n})
    P.header_note(fig, [f"Verdict (bands rule, against {rungs[0].label if rungs else 'the first rung'}): "
                        f"{verdict(rungs)}"])
    P.add_caption(fig, LADDER_TITLE, scale,
                  "Rungs: the FP16 trainer with its rollout in each format (quantized ones as verl's FP8 rollout and "
                  "MXFP4 quantize: docs/sources.md#e17-mismatch-ladder), and BF16 training with an FP8 rollout. x: the "
                  f"median over a run's steps of {M.SEQUENCE_KL_K3}; vertical lines: the paper's Fig. 5 levels "
                  "(R1-Distill-Qwen-1.5B, 0.32 FP16, 7.64 BF16). Points: runs; bars: a rung's min–max over seeds. "
                  "Runs that logged no per-sequence KL (before it was logged) are in the curves only.",
                  scope=data.scope(scale))
    return fig


LADDER_TITLE = "The mismatch ladder: training against the rollout's mismatch"
