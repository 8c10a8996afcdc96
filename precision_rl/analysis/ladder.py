"""The mismatch ladder's dose–response: what each run of a ladder panel (``ladder``: GRPO's; ``ladder_<algorithm>``:
another algorithm's, ``LADDERS``) measured of its own mismatch (the per-sequence KL[μ‖π] it logged) beside how it
trained, and the figure and verdict drawn from them.

A rung is one (experiment, precision arm) of the panel: the FP16 trainer with its rollout in one format, or with
synthetic noise on the rollout's logits (``precision_rl.logit_noise``), and that noise's control (the same noise in
the trainer too). Its dose is the median over a run's steps of ``mismatch/sequence_kl_k3_mean``; its outcome the
final training reward (trailing mean), the last held-out accuracy and the largest |π − μ| of the run. A real rung
degrades when its band of final rewards over seeds lies wholly below the first rung's (the rollout in the trainer's
own format); a synthetic rung, when its band lies wholly below its control's, since the noise also makes the rollout
a worse sampler. Bands that touch overlap.
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
from precision_rl.config.registry import LADDER_PANEL
from precision_rl.formats import MANTISSA_BITS


@dataclass(frozen=True)
class Ladder:
    """One dose–response figure: the panel its rungs feed, its title and what its caption says the rungs are."""

    panel: str
    title: str
    rungs_note: str


LADDER_TITLE = "The mismatch ladder: training against the rollout's mismatch"
LADDERS = {
    "effect_mismatch_ladder": Ladder(
        LADDER_PANEL, LADDER_TITLE,
        "Rungs: the FP16 trainer with its rollout in each format (quantized ones as verl's FP8 rollout and MXFP4 "
        "quantize: docs/sources.md#e17-mismatch-ladder), and BF16 training with an FP8 rollout."),
    "effect_ladder_pg_seq_is": Ladder(
        "ladder_pg_seq_is", "The mismatch ladder for PG-Seq-IS: where its uncapped sequence weight starts to fail",
        "Rungs: PG-Seq-IS (the sanity settings, FP16 trainer and rollout) without noise and at each synthetic "
        "strength, each strength beside its control."),
}
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
    derived_dose: bool = False  # the run predates the per-sequence KL metric: its dose is ``derived_sequence_kl``'s


@dataclass(frozen=True)
class Rung:
    """A rung of the ladder: its label, its rollout format, its synthetic noise and the runs (one per seed) drawn for
    it."""

    label: str
    infer: str
    runs: tuple[RunDose, ...]
    noise: float = 0.0  # the synthetic logit noise's strength σ (0: none)
    control: bool = False  # the noise is in the trainer too: the control of the rung with the same σ

    def values(self, field: str) -> list[float]:
        """Return the runs' finite values of ``field``."""
        return [v for r in self.runs if (v := getattr(r, field)) is not None and np.isfinite(v)]

    def band(self, field: str) -> tuple[float, float, float] | None:
        """Return (mean, min, max) of ``field`` over the runs, or None without values."""
        values = self.values(field)
        return (float(np.mean(values)), min(values), max(values)) if values else None


def summarize_run(run: str, reward: pd.Series | None, heldout: pd.Series | None, sequence_kl: pd.Series | None,
                  max_abs_diff: pd.Series | None, derived_dose: bool = False) -> RunDose:
    """Return the dose and outcome of one run from its series (any may be None or empty)."""
    def has(s):
        return s is not None and not s.dropna().empty

    return RunDose(run, float(sequence_kl.dropna().median()) if has(sequence_kl) else None,
                   float(trailing_mean(reward.dropna()).iloc[-1]) if has(reward) else None,
                   float(heldout.dropna().iloc[-1]) if has(heldout) else None,
                   float(max_abs_diff.dropna().max()) if has(max_abs_diff) else None, derived_dose)


def derived_sequence_kl(token_k3: pd.Series | None, response_length: pd.Series | None) -> pd.Series | None:
    """Return the per-sequence KL[μ‖π] (k3) per step of a run that logged only verl's token mean of k3: that mean
    times the step's mean response length, which is the same sum over the step's response tokens divided by its
    responses (``mismatch/sequence_kl_k3_mean`` sums k3 per response and averages); None without both series."""
    if token_k3 is None or response_length is None:
        return None
    product = (token_k3 * response_length).dropna()
    return product if not product.empty else None


def run_sequence_kl(data, scale: str, run: str) -> tuple[pd.Series | None, bool]:
    """Return a run's per-sequence KL[μ‖π] (k3) per step and whether it was derived (``derived_sequence_kl``, for
    a run logged before the metric existed); (None, False) where neither can be read."""
    logged = _last(data.curves(scale, [run], M.SEQUENCE_KL_K3_Q))
    if logged is not None:
        return logged, False
    derived = derived_sequence_kl(_last(data.curves(scale, [run], M.TOKEN_KL_K3_Q)),
                                  _last(data.curves(scale, [run], M.RESPONSE_LENGTH_Q)))
    return derived, derived is not None


def _below(rung: Rung, reference: Rung) -> bool:
    """Return True when ``rung``'s band of final rewards lies wholly below ``reference``'s, both over ≥ 2 seeds."""
    band, ref = rung.band("final_reward"), reference.band("final_reward")
    return band is not None and ref is not None and len(rung.runs) > 1 and len(reference.runs) > 1 and band[2] < ref[1]


def _banded(rungs: tuple[Rung, ...]) -> bool:
    return all(len(r.runs) > 1 for r in rungs)


def _thin(rungs: list[Rung]) -> str:
    thin = [r.label for r in rungs if len(r.runs) < 2]
    return f"; one seed only: {', '.join(thin)} (no band)" if thin else ""


def verdict(rungs: list[Rung]) -> str:
    """Return the ladder's verdict by the bands rule: for the real rungs against the first rung (the rollout in the
    trainer's format), "degrades from X nats per sequence (rung)" at the smallest dose whose reward band lies wholly
    below the first rung's, else "no degradation resolved up to X nats per sequence", X the largest dose of a rung
    with a band (≥ 2 seeds; the largest of any rung where none has one), rungs of one seed named after it; then, for
    the synthetic rungs, the same against each strength's control."""
    real = [r for r in rungs if not r.noise]
    parts = [_real_verdict(real)] if len(real) > 1 or (real and len(real) == len(rungs)) else []
    synthetic = _synthetic_verdict([r for r in rungs if r.noise])
    return "; ".join(parts + ([synthetic] if synthetic else [])) or "no verdict: no rung has a finished run"


def _real_verdict(rungs: list[Rung]) -> str:
    if rungs[0].band("final_reward") is None:
        return "no verdict: the rung in the trainer's own format has no finished run"
    measured = [(r.band("sequence_kl"), r) for r in rungs[1:] if r.band("sequence_kl") and r.band("final_reward")]
    if not measured:
        return "no verdict: no other rung has a finished run"
    for dose, rung in sorted(measured, key=lambda m: m[0][0]):
        if _below(rung, rungs[0]):
            return f"degrades from {dose[0]:.3g} nats per sequence ({rung.label})"
    largest = max([m for m in measured if _banded((m[1],))] or measured, key=lambda m: m[0][0])
    return (f"no degradation resolved up to {largest[0][0]:.3g} nats per sequence ({largest[1].label})"
            + _thin([r for _, r in measured] + [rungs[0]]))


def _synthetic_verdict(rungs: list[Rung]) -> str:
    """Return the synthetic rungs' verdict, each noised rung against its control, or "" without a finished pair."""
    controls = {r.noise: r for r in rungs if r.control}
    pairs = [(r.band("sequence_kl"), r, controls[r.noise]) for r in rungs if not r.control and r.noise in controls
             and r.band("sequence_kl") and r.band("final_reward") and controls[r.noise].band("final_reward")]
    if not pairs:
        return "synthetic: no rung with a finished control" if rungs else ""
    for dose, rung, control in sorted(pairs, key=lambda p: p[0][0]):
        if _below(rung, control):
            return f"synthetic: degrades against its control from {dose[0]:.3g} nats per sequence (σ = {rung.noise:g})"
    largest = max([p for p in pairs if _banded(p[1:])] or pairs, key=lambda p: p[0][0])
    return (f"synthetic: no degradation against the controls resolved up to {largest[0][0]:.3g} nats per sequence "
            f"(σ = {largest[1].noise:g})" + _thin([r for _, r, c in pairs] + [c for _, r, c in pairs]))


def rung_order(infer: str, noise: float = 0.0, control: bool = False) -> tuple:
    """Return a sort key putting the real rungs from the finest rollout format to the coarsest, then the synthetic
    ones by strength, each control after its rung."""
    return (noise > 0, noise, control, -MANTISSA_BITS.get(infer, 0))


def synthetic_noise(spec) -> tuple[float, bool]:
    """Return the synthetic logit noise of an experiment (σ, whether the trainer carries it too); (0, False): none."""
    return float(spec.hyper.rollout_logit_noise or 0.0), bool(spec.hyper.logit_noise_in_trainer)


def rung_label(spec, arm) -> str:
    """Return a rung's name in legends: its precision label, and for a synthetic rung the noise and whether it is
    the control ("FP16 + logit noise σ=2 (synthetic, control)")."""
    label = P.precision_label(arm.train, arm.infer)
    noise, control = synthetic_noise(spec)
    if not noise:
        return label
    return f"{label} + logit noise σ={noise:g} (synthetic{', control' if control else ''})"


def _last(curves: list[pd.Series]) -> pd.Series | None:
    return curves[0] if curves else None


def ladder_arms(data, scale: str, panel: str = LADDER_PANEL) -> list[ArmRuns]:
    """Return the (experiment, arm) pairs of ladder ``panel`` at ``scale`` with their runs, finest rollout format
    first (``data`` is a ``figures.FigureData``)."""
    arms = [data.arm_runs(scale, spec, arm, rung_label(spec, arm))
            for spec in data.specs(scale).values() for arm in spec.panel_arms(panel)]
    return sorted(arms, key=lambda a: (rung_order(a.arm.infer, *synthetic_noise(a.spec)), a.label))


def ladder_rungs(data, scale: str, arms: list[ArmRuns] | None = None) -> list[Rung]:
    """Return the rungs of the ``ladder`` panel at ``scale`` (``ladder_arms``), each with its finished runs' doses and
    outcomes."""
    rungs = []
    for arm in ladder_arms(data, scale) if arms is None else arms:
        val = arm.spec.data.val
        doses = []
        for run in arm.finished:
            sequence_kl, derived = run_sequence_kl(data, scale, run)
            doses.append(summarize_run(run, _last(data.curves(scale, [run], M.REWARD_Q)),
                                       _last(data.val_curves(scale, [run], val[0])[0]) if val else None, sequence_kl,
                                       _last(data.curves(scale, [run], M.PROBS_DIFF_ABS_MAX_Q)), derived))
        rungs.append(Rung(arm.label, arm.arm.infer, tuple(doses), *synthetic_noise(arm.spec)))
    return rungs


DERIVED_MARKER = "s"  # a run whose dose is derived from verl's token-mean k3 (``derived_sequence_kl``)
OUTCOME_AXIS = (0.0, 1.05)  # every outcome is a share (reward, accuracy, |π − μ|): the whole range, read at a glance
OUTCOMES = (("final_reward", "Final training reward (trailing mean)"), ("heldout", "Held-out accuracy (last)"),
            ("max_abs_diff", "Largest |π − μ| of the run"))


def build_mismatch_ladder(data, scale: str, ladder: Ladder = LADDERS["effect_mismatch_ladder"]):
    """Return the dose–response figure of ``ladder``: each outcome against the per-sequence KL[μ‖π] the run logged
    (log x, one point per run, a rung's min–max as bars, the paper's FP16 and BF16 levels as vertical lines), the
    rungs' dose per step and their reward curves; the verdict under the legend, and in each panel why a rung drew
    nothing."""
    arms = ladder_arms(data, scale, ladder.panel)
    rungs = ladder_rungs(data, scale, arms)
    fig, axes = P.new_figure(1, len(OUTCOMES) + 2, panel_size=(2.9, 2.4))
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, max(len(rungs), 1)))
    for ax, (field, title) in zip(axes[0], OUTCOMES, strict=False):
        ax.set_title(title)
        ax.set_xscale("log")
        ax.set_xlim(*DOSE_AXIS)
        ax.set_xticks(DOSE_TICKS)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("KL[μ‖π] per sequence (k3, median over steps)")
        ax.set_ylim(*OUTCOME_AXIS)
        seeds = []
        for rung, color in zip(rungs, colors, strict=True):
            points = [(r.sequence_kl, getattr(r, field), r.derived_dose) for r in rung.runs
                      if r.sequence_kl is not None and r.sequence_kl > 0 and getattr(r, field) is not None]
            seeds.append(len(points))
            if not points:
                continue
            xs, ys, _ = zip(*points, strict=True)
            for marker, keep in (("o", False), (DERIVED_MARKER, True)):
                chosen = [(x, y) for x, y, d in points if d == keep]
                if chosen:
                    ax.scatter(*zip(*chosen, strict=True), s=14, zorder=3, marker=marker, edgecolors=color,
                               facecolors="none" if rung.control else color)
            ax.errorbar([np.mean(xs)], [np.mean(ys)], xerr=[[np.mean(xs) - min(xs)], [max(xs) - np.mean(xs)]],
                        yerr=[[np.mean(ys) - min(ys)], [max(ys) - np.mean(ys)]], color=color, linewidth=1,
                        capsize=2, zorder=2)
        for name, level in M.PAPER_SEQUENCE_KL.items():
            ax.axvline(level, color="0.4", linestyle=":" if name == "fp16" else "--", linewidth=1)
            ax.annotate(f"paper {P.PRECISION_NAMES[name]}", (level, 1.0), xycoords=("data", "axes fraction"),
                        fontsize=6, rotation=90, va="top", ha="right", color="0.3")
        finish_panel(ax, arms, seeds, scale, f"{M.SEQUENCE_KL_K3} and {title.lower()}", legend_has_seeds=True)
    styles = ["--" if rung.control else "-" for rung in rungs]  # a control dashed beside its rung's solid line
    dose_ax = axes[0, -2]
    dose_ax.set_title("Dose per step")
    dose_ax.set_xlabel("Training steps")
    dose_ax.set_ylabel("KL[μ‖π] per sequence (k3)")
    dose_ax.set_yscale("log")
    doses = [P.draw_training_curve(dose_ax, [kl for kl, _ in (run_sequence_kl(data, scale, run) for run in arm.finished)
                                             if kl is not None], color, arm.label, linestyle=style)
             for arm, color, style in zip(arms, colors, styles, strict=True)]
    for name, level in M.PAPER_SEQUENCE_KL.items():
        dose_ax.axhline(level, color="0.4", linestyle=":" if name == "fp16" else "--", linewidth=1)
    finish_panel(dose_ax, arms, doses, scale, M.SEQUENCE_KL_K3, legend_has_seeds=True)
    curves_ax = axes[0, -1]
    curves_ax.set_title("Training reward per rung")
    curves_ax.set_xlabel("Training steps")
    seeds = [P.draw_training_curve(curves_ax, data.curves(scale, list(arm.finished), M.REWARD_Q), color, arm.label,
                                   linestyle=style)
             for arm, color, style in zip(arms, colors, styles, strict=True)]
    finish_panel(curves_ax, arms, seeds, scale, M.REWARD, legend_has_seeds=True)
    P.figure_legend(fig, {legend_label(arm): (color, style)
                          for arm, color, style, n in zip(arms, colors, styles, seeds, strict=True) if n})
    real = [r for r in rungs if not r.noise]
    against = real[0].label if len(real) > 1 else "each strength's control"
    P.header_note(fig, [f"Verdict (bands rule, against {against}): {verdict(rungs)}"])
    P.add_caption(fig, ladder.title, scale,
                  f"{ladder.rungs_note} x: the median over a run's steps of {M.SEQUENCE_KL_K3}; vertical lines: "
                  "the paper's Fig. 5 levels "
                  "(R1-Distill-Qwen-1.5B, 0.32 FP16, 7.64 BF16), horizontal in the dose-per-step panel. Points: runs; bars: a rung's min–max over seeds. "
                  "Synthetic rungs add seeded Gaussian noise σ to the rollout's logits "
                  "(docs/sources.md#e18-synthetic-mismatch); their controls (hollow points, dashed curves) add it to the trainer's too: the "
                  "same worse sampler, no mismatch. Squares: runs logged before the per-sequence KL was, "
                  "their dose verl's token-mean k3 times the step's mean response length (the same sum over the step's "
                  "tokens per response); runs with neither are in the curves only.",
                  scope=data.scope(scale))
    return fig
