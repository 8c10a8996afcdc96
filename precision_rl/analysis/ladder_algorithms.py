"""The paper's Fig. 1 algorithms on the mismatch ladder: each algorithm trained with the ladder's degrading rollout,
beside the same algorithm with its rollout in the trainer's format (the paper's "FP16 fix") and, at a synthetic
rung, the rung's control (the same noise in the trainer too), with a verdict per algorithm by the bands rule.

A panel ``ladder_fig1<x>`` of the registry holds one algorithm's arms. Each arm's role follows from its experiment:
a synthetic noise carried by the trainer too is the control; a noise in the rollout alone, or a rollout in another
format than the trainer's, is the degrading rung; the rest is the rollout in the trainer's format. The mismatch's
cost is the rung against its no-mismatch arm: the control at a synthetic rung (the noise also makes the rollout a
worse sampler), the trainer-format rollout at a real one.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_rl import metrics as M
from precision_rl.analysis import plotting as P
from precision_rl.analysis.ladder import Rung, ladder_rungs, rung_label, synthetic_noise
from precision_rl.analysis.panel_notes import ArmRuns, panel_arms, panel_ids, panel_lines

PANEL_PREFIX = "ladder_fig1"
GRPO = "grpo"  # the algorithm without a correction: the others recover from what it loses
CLEAN, RUNG, CONTROL = "trainer's format", "degrading rung", "control"
# Each role's look in every panel: the clean arm in FP16's colour, the rung solid red, its control dashed red.
ROLE_LOOKS = {CLEAN: (P.PRECISION_COLORS["fp16"], "-"), RUNG: ("#d62728", "-"), CONTROL: ("#d62728", "--")}
PARTLY_SHARE = 0.5  # an algorithm recovers "partly" when its shortfall is under this share of GRPO's


@dataclass(frozen=True)
class AlgorithmArms:
    """One algorithm's panel: the algorithm, its name in titles, and its arms by role (one per role), each with its
    finished runs' outcomes."""

    algorithm: str
    title: str
    arms: dict[str, ArmRuns]
    rungs: dict[str, Rung]

    def reference_role(self) -> str:
        """Return the role of the no-mismatch arm the rung is judged against: the control where the rung has one
        (a synthetic rung), else the rollout in the trainer's format."""
        return CONTROL if CONTROL in self.rungs else CLEAN

    def shortfall(self) -> float | None:
        """Return how far the rung's mean final reward lies below its no-mismatch arm's (negative: above), or None
        where either has no finished run."""
        rung, reference = self.rungs.get(RUNG), self.rungs.get(self.reference_role())
        if rung is None or reference is None or not (rung.band("final_reward") and reference.band("final_reward")):
            return None
        return reference.band("final_reward")[0] - rung.band("final_reward")[0]

    def resolved_below(self) -> bool:
        """Return True when the rung's band of final rewards lies wholly below its no-mismatch arm's, each over
        ≥ 2 seeds."""
        if self.thin():
            return False
        band, ref = self.rungs[RUNG].band("final_reward"), self.rungs[self.reference_role()].band("final_reward")
        return band is not None and ref is not None and band[2] < ref[1]

    def thin(self) -> bool:
        """Return True when the rung or its no-mismatch arm has fewer than two finished seeds (no band to judge)."""
        rung, reference = self.rungs.get(RUNG), self.rungs.get(self.reference_role())
        return rung is None or reference is None or len(rung.runs) < 2 or len(reference.runs) < 2


def arm_role(spec, arm) -> str:
    """Return an arm's role in its algorithm's panel: CONTROL, RUNG or CLEAN (the rollout in the trainer's format)."""
    noise, in_trainer = synthetic_noise(spec)
    if noise and in_trainer:
        return CONTROL
    return RUNG if noise or arm.infer != arm.train else CLEAN


def algorithm_panels(data, scale: str) -> dict[str, AlgorithmArms]:
    """Return the ``ladder_fig1*`` panels at ``scale`` by panel id, each algorithm's arms by role with their runs
    (``data`` is a ``figures.FigureData``)."""
    specs = data.specs(scale)
    panels = {}
    for panel in panel_ids(specs, PANEL_PREFIX):
        arms = {arm_role(spec, arm): data.arm_runs(scale, spec, arm, rung_label(spec, arm))
                for spec, arm in panel_arms(specs, panel)}
        rungs = dict(zip(arms, ladder_rungs(data, scale, list(arms.values())), strict=True))
        algorithm = next(iter(arms.values())).spec.algorithm
        panels[panel] = AlgorithmArms(algorithm, P.ALGORITHM_LABELS.get(algorithm, algorithm), arms, rungs)
    return panels


def algorithm_verdict(panel: AlgorithmArms, grpo_shortfall: float | None) -> str:
    """Return one algorithm's verdict by the bands rule against its no-mismatch arm: with GRPO degraded at the rung
    (``grpo_shortfall``: its resolved shortfall), "recovers" (band not below), "partly" (below by under half GRPO's
    shortfall) or "not"; with GRPO not degraded, "degraded" or "no effect resolved"; each with the reward difference
    against the no-mismatch arm; "no band yet" where either has a single seed, "no verdict" where either has none."""
    shortfall = panel.shortfall()
    if shortfall is None:
        return f"no verdict: the rung or its {panel.reference_role()} has no finished run"
    size = f"reward {-shortfall:+.3f} against its {panel.reference_role()}"
    if panel.thin():
        return f"no band yet, one seed on a side ({size})"
    if grpo_shortfall is None:
        return f"degraded ({size})" if panel.resolved_below() else f"no effect resolved ({size})"
    if not panel.resolved_below():
        return f"recovers ({size})"
    return f"{'partly' if shortfall < PARTLY_SHARE * grpo_shortfall else 'not'} ({size}; GRPO {-grpo_shortfall:+.3f})"


def verdicts(panels: dict[str, AlgorithmArms]) -> dict[str, str]:
    """Return each panel's verdict by panel id, GRPO's resolved shortfall (its panel's) deciding whether the others
    read as recoveries."""
    grpo = next((arms for arms in panels.values() if arms.algorithm == GRPO), None)
    grpo_shortfall = grpo.shortfall() if grpo is not None and grpo.resolved_below() else None
    return {panel: algorithm_verdict(arms, None if arms is grpo else grpo_shortfall) for panel, arms in panels.items()}


def build_ladder_algorithms(data, scale: str):
    """Return the ladder's Fig. 1: one panel per algorithm with the training reward of its degrading rung, the
    rung's control and its rollout in the trainer's format (mean and min–max over seeds), and in each panel its
    verdict and its arms' seeds, or why an arm drew nothing."""
    panels = algorithm_panels(data, scale)
    ncols = min(3, len(panels)) or 3
    nrows = max(1, -(-len(panels) // ncols))
    fig, axes = P.new_figure(nrows, ncols, panel_size=(3.4, 2.4))
    per_panel = verdicts(panels)
    legend: dict[str, tuple] = {}
    curve_axes = []
    for ax, (panel, arms) in zip(axes.flat, panels.items(), strict=False):
        ax.set_title(f"({panel[len(PANEL_PREFIX):]}) {arms.title}")
        ax.set_xlabel("Training steps")
        ax.set_ylabel(M.REWARD_Q.label)
        drawn, seeds = [], []
        for role in (CLEAN, RUNG, CONTROL):
            if role not in arms.arms:
                continue
            arm, (color, style) = arms.arms[role], ROLE_LOOKS[role]
            drawn.append(ArmRuns(arm.spec, arm.arm, role, arm.finished, arm.unfinished))
            seeds.append(P.draw_training_curve(ax, data.curves(scale, list(arm.finished), M.REWARD_Q), color,
                                               arm.label, linestyle=style))
            if seeds[-1]:
                legend.setdefault(f"{role}: {arm.label}", (color, style))
        lines = panel_lines(drawn, seeds, scale, M.REWARD)
        if any(seeds):
            P.corner_note(ax, lines + [f"Verdict: {per_panel[panel]}"])
            curve_axes.append(ax)
        else:
            P.mark_empty(ax, lines)
    # One reward scale for every drawn panel, so that panels compare at a glance.
    if curve_axes:
        low, high = min(ax.get_ylim()[0] for ax in curve_axes), max(ax.get_ylim()[1] for ax in curve_axes)
        for ax in curve_axes:
            ax.set_ylim(low, high)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    P.figure_legend(fig, legend)
    P.add_caption(fig, LADDER_ALGORITHMS_TITLE, scale,
                  "Each algorithm of the paper's Fig. 1 (its sanity settings) with the ladder's degrading rollout "
                  "(red), the rung's control where the rung is synthetic (dashed red: the same noise in the trainer "
                  "too, the worse sampler without the mismatch) and its rollout in the trainer's format (green, the "
                  "paper's FP16 fix). Verdicts by the bands rule over seeds, final training reward (trailing mean) "
                  "against the no-mismatch arm (the control at a synthetic rung); with GRPO degraded, 'recovers' "
                  f"(bands overlap), 'partly' (below by under {PARTLY_SHARE:g} of GRPO's shortfall) or 'not'. "
                  "Synthetic rungs: docs/sources.md#e18-synthetic-mismatch.", scope=data.scope(scale))
    return fig


LADDER_ALGORITHMS_TITLE = "The ladder's Fig. 1: the paper's algorithms at the ladder's degrading rollout"
