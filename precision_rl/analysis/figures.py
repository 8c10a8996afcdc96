"""The paper's figures, built from the tidy table and the registry (docs/figures.md).

Which experiments and precision arms feed a panel comes from each spec's ``paper`` list (``fig1a``,
``fig3:bf16``, ``ablation``): nothing here names an experiment. Panel titles are derived from the experiment's
family and algorithm through the label mappings below, the only place such titles live. Every figure is drawn
per scale, from finished runs only. Each panel states every arm it feeds: how many seeds it drew
("FP16, BF16: 3 seeds"), or why it drew nothing, derived from the run table ("BF16: not run yet — make grid
EXP='sanity/gspo' SCALE=tiny", "BF16: run unfinished (died)", "BF16: no data (… not logged)", at paper scale
"not run (paper scale needs GPUs)"): across the panel when nothing is drawn, in its corner otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from precision_rl import metrics as M
from precision_rl.analysis import plotting as P
from precision_rl.analysis.ladder import LADDERS, build_mismatch_ladder
from precision_rl.analysis.ladder_algorithms import LADDER_ALGORITHMS_TITLE, build_ladder_algorithms
from precision_rl.analysis.logs import RunTable
from precision_rl.analysis.mismatch_results import load_offline, read_summary, result_dirs
from precision_rl.analysis.mismatch_scaling import (
    draw_mismatch_scaling,
    load_natural,
    load_profiles,
    natural_dirs,
    natural_length,
    profile_dirs,
    width_table,
)
from precision_rl.analysis.panel_notes import (
    ArmRuns,
    finish_panel,
    panel_arms,
    panel_ids,
    shared_legend,
    why_missing,
)
from precision_rl.analysis.records import EXTERNAL_STATUS
from precision_rl.analysis.series import SeriesIndex, trailing_mean
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.profiles import CALIBRATED, PAPER_PROFILE, QUICK
from precision_rl.config.registry import ExperimentSpec, load_all
from precision_rl.config.scale import PAPER, SCALES, TINY
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_json
from precision_rl.launch.eta import cpu_label
from precision_rl.launch.runs import FINISHED, read_manifest
from precision_rl.paths import QUICK_FIGURES_DIR, REPO_ROOT
from precision_rl.tiny.data import VAL_RECIPE, instrument_record, read_problem_list
from precision_rl.tiny.shipped import SHIPPED_DIR

FAMILY_LABELS = {"sanity": "Sanity", "octothinker": "OctoThinker", "lora": "LoRA", "moe": "MoE",
                 "dense14b": "Dense-14B", "ablation": "Ablation"}
DATASET_LABELS = {"aime24": "AIME 2024", "aime25": "AIME 2025", "math500": "MATH500",
                  VAL_RECIPE: "Tiny sanity validation set"}
FIGURE_TITLES = {
    "fig1_training_reward": "Fig. 1: training reward, BF16 vs FP16",
    "fig2_eval_accuracy": "Fig. 2: evaluation accuracy, BF16 vs FP16",
    "fig3_mismatch_dynamics": "Fig. 3: BF16 algorithms vs FP16 PG-Seq-IS",
    "fig4_fp16_algorithms": "Fig. 4: FP16 algorithm comparison",
    "fig5_offline_mismatch": "Fig. 5: offline mismatch",
    "ablation_precision": "Precision ablation: training × inference dtype",
    "ablation_fork_changes": "FP16 vs BF16 with and without the fork's optimizer and loss changes",
    "effect_mismatch_scaling": "Beyond the paper: mismatch against model width and response length",
    **{name: ladder.title for name, ladder in LADDERS.items()},
    "effect_ladder_algorithms": LADDER_ALGORITHMS_TITLE,
}
FORK_ABLATION_PANEL = "fork_ablation"
CURVE_NOTE = ("Training curves: faint = raw per-step value (mean over seeds), bold = EMA (span 5 % of the steps); "
              "evaluation curves are unsmoothed points. Band: min–max over seeds, where an arm has several.")
STEPS = "Training steps"
ASSUMED_REWARD_MARK = "†"
MEGATRON_MARK = "‡"
MEGATRON_NOTE = (f"{MEGATRON_MARK}: Megatron runs; the suite's fp16 loss-scale metrics (precision/loss_scale, "
                 "precision/skipped_steps) come from its FSDP engine only, so these runs log none and their skipped "
                 "steps are read from non-finite grad norms.")
ASSUMED_REWARD_NOTE = (f"{ASSUMED_REWARD_MARK}: the template, data and reward are the suite's assumptions "
                       "(docs/sources.md#assumptions), so the absolute level is not the paper's; compare the arms.")
DRAWN_STATUSES = (FINISHED, EXTERNAL_STATUS)
LOGS_DIR_NAME = "results/logs/"
MIN_GRID_WIDTH = 7.0  # inches of panels in a grid figure however few panels it draws


def _megatron_note(scale: str) -> str:
    """Return the caption's note on the Megatron panels at paper scale (the tiny stand-ins train with FSDP)."""
    return f"{MEGATRON_NOTE} " if scale == PAPER else ""


def tiny_scope(profile: str) -> str:
    """Return how a tiny figure names its runs' profile and instrument: the profile, the shipped model's weights
    (sha256 prefix) and the sanity set's size."""
    record = instrument_record(SHIPPED_DIR)
    return (f"{profile} profile; instrument: shipped model {record['model_weights_sha256'][:8]}, "
            f"{len(read_problem_list().train)} training problems")


@dataclass
class FigureData:
    """Everything a figure reads: the table, its series index, the registry per scale, the mismatch results (one
    folder or several; where two hold the same result, the first is drawn)."""

    table: RunTable
    mismatch_roots: Path | Sequence[Path]
    profile: str = CALIBRATED  # at tiny scale a figure draws the runs of this profile only
    index: SeriesIndex = field(init=False)
    _last_step: dict[tuple[str, str], int] = field(default_factory=dict, init=False)  # (scale, run) -> step drawn to
    _specs: dict[str, dict[str, ExperimentSpec]] = field(default_factory=dict, init=False)
    _runs: dict[tuple, list[tuple[str, str]]] = field(default_factory=dict, init=False)  # key -> (run, status)
    _sources: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    read: set[tuple[str, str]] = field(default_factory=set, init=False)  # (scale, run) pairs a figure drew from
    read_results: set[Path] = field(default_factory=set, init=False)  # mismatch result folders a figure drew from

    def __post_init__(self):
        roots = [self.mismatch_roots] if isinstance(self.mismatch_roots, (str, Path)) else self.mismatch_roots
        self.mismatch_roots = tuple(Path(r) for r in roots)
        self.index = SeriesIndex(self.table.metrics)
        runs = self.table.runs.sort_values(["seed", "run"]) if len(self.table.runs) else self.table.runs
        own = {(r.experiment, r.precision_train, r.precision_infer, r.seed) for r in runs.itertuples(index=False)
               if str(r.scale) == TINY and str(r.profile) == self.profile}
        for row in runs.itertuples(index=False):
            if str(row.scale) == PAPER and str(row.profile) != PAPER_PROFILE:
                continue  # a smoke run checks an install: it is no point of a paper-scale curve
            if str(row.scale) == TINY and str(row.profile) != self.profile:
                # A quick run is the first steps of the calibrated run of its seed: where a seed has no quick run,
                # its calibrated run stands in for it, drawn to the quick profile's last step.
                stands_in = (self.profile == QUICK and str(row.profile) == CALIBRATED
                             and (row.experiment, row.precision_train, row.precision_infer, row.seed) not in own)
                spec = self.specs(TINY).get(str(row.experiment)) if stands_in else None
                quick_steps = spec.quick_steps if spec is not None else None
                if not quick_steps:
                    continue
                self._last_step[(str(row.scale), str(row.run))] = quick_steps
            key = (str(row.scale), str(row.experiment), str(row.precision_train), str(row.precision_infer))
            status = row.status if isinstance(row.status, str) and row.status else "status unknown"
            self._runs.setdefault(key, []).append((str(row.run), status))
            self._sources[(str(row.scale), str(row.run))] = str(row.source)

    def scope(self, scale: str) -> str:
        """Return what a training figure's runs are at ``scale``, for its title and caption: at tiny scale the profile,
        the instrument ("calibrated profile; instrument: shipped model d0ce323d, 256 training problems") and the CPU
        kinds of the runs drawn so far (``eta.cpu_label``); at paper scale nothing."""
        if scale != TINY:
            return ""
        cut = sorted({self._last_step[key] for key in self.read if key in self._last_step})
        stand_ins = (f" (calibrated runs drawn to step {'/'.join(map(str, cut))} stand in for the quick runs of their seeds)"
                     if cut else "")
        return (tiny_scope(self.profile) + stand_ins
                + (f"; runs on {' and '.join(kinds)}" if (kinds := self.cpu_kinds(scale)) else ""))

    def cpu_kinds(self, scale: str) -> list[str]:
        """Return the CPU kinds (``eta.cpu_label``) the runs drawn so far at ``scale`` ran on, from their manifests."""
        kinds: set[str] = set()
        for key in self.read:
            if key[0] != scale or key not in self._sources:
                continue
            try:
                kinds.add(cpu_label(read_manifest(Path(self._sources[key])).get("hardware") or {}))
            except (OSError, ValueError):
                continue  # a wandb export or an unreadable manifest names no CPU
        return sorted(kinds)

    def has_runs(self, scale: str, experiment: str, arm: PrecisionArm) -> bool:
        """Return True when ``experiment``'s ``arm`` has a run at ``scale``, finished or not (not noted as read)."""
        return bool(self._runs.get((scale, experiment, arm.train, arm.infer)))

    def specs(self, scale: str) -> dict[str, ExperimentSpec]:
        """Return the registry at ``scale`` (loaded once)."""
        if scale not in self._specs:
            self._specs[scale] = load_all(scale)
        return self._specs[scale]

    def runs(self, scale: str, experiment: str, arm: PrecisionArm) -> list[str]:
        """Return the names of the finished runs (one per seed) of ``experiment``'s ``arm`` at ``scale``, the ones a
        figure draws; note them as read."""
        names = [name for name, status in self._runs.get((scale, experiment, arm.train, arm.infer), [])
                 if status in DRAWN_STATUSES]
        self.read.update((scale, name) for name in names)
        return names

    def unfinished(self, scale: str, experiment: str, arm: PrecisionArm) -> list[str]:
        """Return the statuses (``died``, ``running``, ``failed`` …) of ``experiment``'s ``arm``'s runs at ``scale``
        that did not finish, which figures do not draw."""
        return [status for _, status in self._runs.get((scale, experiment, arm.train, arm.infer), [])
                if status not in DRAWN_STATUSES]

    def arm_runs(self, scale: str, spec: ExperimentSpec, arm: PrecisionArm, label: str) -> ArmRuns:
        """Return what a panel knows of ``spec``'s ``arm`` at ``scale``: its finished and unfinished runs."""
        return ArmRuns(spec, arm, label, tuple(self.runs(scale, spec.name, arm)),
                       tuple(self.unfinished(scale, spec.name, arm)))

    def sources(self, pairs, result_dirs=()) -> list[str]:
        """Return where the runs of ``pairs`` (scale, run) were read from, and the mismatch ``result_dirs``, relative
        to the repository, sorted."""
        out = []
        for path in [Path(self._sources.get(pair, pair[1])) for pair in pairs] + [Path(d) for d in result_dirs]:
            out.append(str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path))
        return sorted(out)

    def with_profile(self, profile: str) -> FigureData:
        """Return the figure data of the same runs drawn in ``profile`` (this one where it already is)."""
        return self if profile == self.profile else FigureData(self.table, self.mismatch_roots, profile)

    def _cut(self, scale: str, run: str, series: pd.Series | None) -> pd.Series | None:
        last = self._last_step.get((scale, run))
        return series if series is None or last is None else series[series.index <= last]

    def curves(self, scale: str, runs: list[str], quantity: M.Quantity) -> list[pd.Series]:
        """Return ``quantity``'s series of each run that logged it (a run standing in for a shorter profile's cut to
        that profile's steps)."""
        out = [self._cut(scale, r, self.index.quantity(scale, r, quantity)) for r in runs]
        return [c for c in out if c is not None and not c.empty]

    def val_curves(self, scale: str, runs: list[str], data_source: str) -> tuple[list[pd.Series], str | None]:
        """Return each run's validation accuracy series on ``data_source`` and the metric name found."""
        out, found = [], None
        for run in runs:
            name = M.val_metric(self.index.logged(scale, run), data_source)
            if name:
                series = self._cut(scale, run, self.index.get(scale, run, name))
                if series is not None and not series.empty:
                    out.append(series)
                    found = found or name
        return out, found


# --------------------------------------------------------------------------------------------- panels

def experiment_title(spec: ExperimentSpec) -> str:
    """Return a panel title for ``spec``: its family and algorithm, e.g. "Sanity GRPO-Token-TIS"."""
    family = FAMILY_LABELS.get(spec.family, spec.family)
    return f"{family} {P.ALGORITHM_LABELS.get(spec.algorithm, spec.algorithm)}"


def dataset_label(name: str) -> str:
    """Return how figures name a validation set (e.g. "AIME 2024")."""
    return DATASET_LABELS.get(name, name)


def _arm_name(spec: ExperimentSpec, arm: PrecisionArm) -> str:
    return f"{P.precision_label(arm.train, arm.infer)} {P.ALGORITHM_LABELS.get(spec.algorithm, spec.algorithm)}"


# --------------------------------------------------------------------------------------------- Fig. 1 / 2

def _grid(data: FigureData, scale: str, prefix: str, draw_panel: Callable, what: str) -> tuple:
    """Return a grid figure of the ``prefix`` panels, its axes and its legend (label → colour, style);
    ``draw_panel(ax, spec, arm, runs, color)`` draws one arm and returns the seeds it drew."""
    specs = data.specs(scale)
    panels = panel_ids(specs, prefix)
    omitted = []
    if scale == TINY:
        drawn = [p for p in panels if any(data.has_runs(scale, s.name, a) for s, a in panel_arms(specs, p))]
        if drawn:
            omitted, panels = [p for p in panels if p not in drawn], drawn
    ncols = min(4, len(panels)) or 4
    nrows = max(1, -(-len(panels) // ncols))
    fig, axes = P.new_figure(nrows, ncols, panel_size=(max(3.0, MIN_GRID_WIDTH / ncols), 2.2))
    legend: dict[str, tuple] = {}
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.axis("off")
            continue
        pairs = panel_arms(specs, panels[k])
        titles = sorted({experiment_title(s) for s, _ in pairs})
        mark = f" {ASSUMED_REWARD_MARK}" if any(s.reward_assumed for s, _ in pairs) else ""
        mark += f" {MEGATRON_MARK}" if any(s.backend == "megatron" for s, _ in pairs) else ""
        ax.set_title(f"({panels[k][len(prefix):]}) {' / '.join(titles)}{mark}")
        arms, seeds = [], []
        for spec, arm in pairs:
            label = P.precision_label(arm.train, arm.infer)
            color = P.PRECISION_COLORS.get(arm.train, "0.3")
            arms.append(data.arm_runs(scale, spec, arm, label))
            seeds.append(draw_panel(ax, spec, arm, list(arms[-1].finished), color) if arms[-1].finished else 0)
            if seeds[-1]:
                legend[label] = (color, "-")
        ax.set_xlabel(STEPS)
        finish_panel(ax, arms, seeds, scale, what)
    if omitted:
        names = ", ".join(f"({p[len(prefix):]}) {' / '.join(sorted({experiment_title(s) for s, _ in panel_arms(specs, p)}))}"
                          for p in omitted)
        legend_note = (f"Not drawn: {names} — no {data.profile}-profile run of the shipped instrument yet "
                       f"(the retired 12-problem runs are in the git history of {LOGS_DIR_NAME})")
        if elsewhere := _panels_with_quick_runs(data, scale, specs, omitted):
            legend_note += (f"; {', '.join(f'({p[len(prefix):]})' for p in elsewhere)} "
                            f"{'has' if len(elsewhere) == 1 else 'have'} quick-profile runs, drawn in this figure's "
                            f"quick-profile version ({QUICK_FIGURES_DIR.relative_to(REPO_ROOT)}/{scale}/)")
        return fig, axes, legend, legend_note
    return fig, axes, legend, None


def _panels_with_quick_runs(data: FigureData, scale: str, specs: dict[str, ExperimentSpec],
                            panels: list[str]) -> list[str]:
    """Return those of ``panels`` that a quick-profile version of a tiny figure in another profile would draw."""
    if scale != TINY or data.profile == QUICK:
        return []
    quick = data.with_profile(QUICK)
    return [p for p in panels if any(quick.has_runs(scale, s.name, a) for s, a in panel_arms(specs, p))]


def build_fig1(data: FigureData, scale: str):
    """Return Fig. 1: the training-reward grid (one panel per fig1* panel of the registry)."""
    def draw(ax, spec, arm, runs, color):
        ax.set_ylabel(M.REWARD_Q.label)
        return P.draw_training_curve(ax, data.curves(scale, runs, M.REWARD_Q), color,
                                     P.precision_label(arm.train, arm.infer))

    fig, _, legend, omitted = _grid(data, scale, "fig1", draw, M.REWARD)
    P.figure_legend(fig, legend)
    P.header_note(fig, [omitted] if omitted else [])
    P.add_caption(fig, FIGURE_TITLES["fig1_training_reward"], scale, f"y: {M.REWARD}. {ASSUMED_REWARD_NOTE} {_megatron_note(scale)}{CURVE_NOTE}",
                  scope=data.scope(scale))
    return fig


def build_fig2(data: FigureData, scale: str):
    """Return Fig. 2: the evaluation-accuracy grid (each experiment's first validation set)."""
    def draw(ax, spec, arm, runs, color):
        if not spec.data.val:
            return 0
        curves, name = data.val_curves(scale, runs, spec.data.val[0])
        if name:
            ax.set_ylabel(f"{dataset_label(spec.data.val[0])} {name.rsplit('/', 1)[-1]}")
        return P.draw_eval_curve(ax, curves, color, P.precision_label(arm.train, arm.infer))

    fig, _, legend, omitted = _grid(data, scale, "fig2", draw, "validation accuracy")
    P.figure_legend(fig, legend)
    P.header_note(fig, [omitted] if omitted else [])
    P.add_caption(fig, FIGURE_TITLES["fig2_eval_accuracy"], scale,
                  f"y: val-core/<first validation set>/acc/mean@n, unsmoothed. {ASSUMED_REWARD_NOTE} {_megatron_note(scale)}"
                  f"{CURVE_NOTE}",
                  scope=data.scope(scale))
    return fig


# --------------------------------------------------------------------------------------------- Fig. 3 / 4

def _by_algorithm(spec: ExperimentSpec, arm: PrecisionArm) -> tuple[str, str, str]:
    return P.ALGORITHM_COLORS.get(spec.algorithm, "0.3"), "-", _arm_name(spec, arm)


def _algorithm_row(data: FigureData, scale: str, panel: str, columns: list[tuple[str, Callable]],
                   look: Callable = _by_algorithm):
    """Return a one-row figure of ``columns`` over the runs of ``panel``; ``look`` gives each (experiment, arm) its
    colour, line style and label (default: colour by algorithm)."""
    pairs = panel_arms(data.specs(scale), panel)
    looks = [look(spec, arm) for spec, arm in pairs]
    arms = [data.arm_runs(scale, spec, arm, label) for (spec, arm), (_, _, label) in zip(pairs, looks, strict=True)]
    fig, axes = P.new_figure(1, len(columns), panel_size=(3.0, 2.4))
    drew = [False] * len(arms)
    for c, (title, draw) in enumerate(columns):
        ax = axes[0, c]
        ax.set_title(title)
        ax.set_xlabel(STEPS)
        if draw is None:
            P.mark_empty(ax, f"{title}: none at this scale")
            continue
        seeds = [draw(ax, spec, arm, list(runs.finished), color, label, style) if runs.finished else 0
                 for (spec, arm), (color, style, label), runs in zip(pairs, looks, arms, strict=True)]
        drew = [d or bool(n) for d, n in zip(drew, seeds, strict=True)]
        finish_panel(ax, arms, seeds, scale, title, legend_has_seeds=True)
    shared_legend(fig, arms, [(color, style) for color, style, _ in looks], drew, scale)
    return fig


def _training(data, scale, quantity, ylabel=None, log=False, symlog=False):
    def draw(ax, spec, arm, runs, color, label, style):
        ax.set_ylabel(ylabel or quantity.label)
        if log:
            ax.set_yscale("log")
        elif symlog:
            ax.set_yscale("symlog", linthresh=1e-6)
        curves = data.curves(scale, runs, quantity)
        if log:
            curves = [c[c > 0] for c in curves]
        return P.draw_training_curve(ax, curves, color, label, style)
    return draw


def _validation(data, scale, k):
    def draw(ax, spec, arm, runs, color, label, style):
        if len(spec.data.val) <= k:
            return 0
        curves, name = data.val_curves(scale, runs, spec.data.val[k])
        if name:
            ax.set_ylabel(name.rsplit("/", 2)[-2] + "/" + name.rsplit("/", 1)[-1])
        return P.draw_eval_curve(ax, curves, color, label, style)
    return draw


def _validation_column(data: FigureData, scale: str, panel: str, k: int) -> tuple[str, Callable | None]:
    """Return the column of the ``k``-th validation set of ``panel``'s experiments: its title (the sets' names) and
    its drawing, None when no experiment has a ``k``-th set at ``scale``."""
    names = sorted({s.data.val[k] for s, _ in panel_arms(data.specs(scale), panel) if len(s.data.val) > k})
    if not names:
        return f"Validation set {k + 1}", None
    return " / ".join(dataset_label(n) for n in names), _validation(data, scale, k)


def _max_min(data, scale):
    def draw(ax, spec, arm, runs, color, label, style):
        ax.set_ylabel("π − μ")
        hi = data.curves(scale, runs, M.PROBS_DIFF_MAX_Q)
        lo = data.curves(scale, runs, M.PROBS_DIFF_MIN_Q)
        drew = max(P.draw_training_curve(ax, hi, color, label, style),
                   P.draw_training_curve(ax, lo, color, "_" + label, style))
        if drew and not any(line.get_label() == "No mismatch" for line in ax.get_lines()):
            zero = ax.axhline(0.0, color="red", linestyle="--", linewidth=1, label="No mismatch")
            ax.legend(handles=[zero], loc="lower left")
        return drew
    return draw


def build_fig3(data: FigureData, scale: str):
    """Return Fig. 3: reward, validation accuracy and mismatch of the fig3 runs (BF16 algorithms vs FP16 PG-Seq-IS)."""
    columns = [
        ("Rewards", _training(data, scale, M.REWARD_Q)),
        _validation_column(data, scale, "fig3", 0),
        ("Mean[Abs(π − μ)]", _training(data, scale, M.MEAN_ABS_DIFF_Q)),
        ("KL[μ‖π] per token, k3", _training(data, scale, M.TOKEN_KL_K3_Q, log=True)),
        ("KL[μ‖π] per token, k1 (oat's)", _training(data, scale, M.TOKEN_KL_K1_Q, symlog=True)),
        ("Max & Min of π − μ", _max_min(data, scale)),
    ]
    fig = _algorithm_row(data, scale, "fig3", columns)
    P.add_caption(fig, FIGURE_TITLES["fig3_mismatch_dynamics"], scale,
                  f"Mismatch: {M.PROBS_DIFF_ABS_MEAN}; KL: k3 {M.TOKEN_KL_K3} (log axis) and k1 {M.TOKEN_KL_K1}, the "
                  f"estimator the paper's oat row plots (symmetric log axis: a batch's k1 can be negative); actor/ "
                  f"prefix in bypass mode; max/min: {M.PROBS_DIFF_MAX}, {M.PROBS_DIFF_MIN}. " + CURVE_NOTE,
                  scope=data.scope(scale))
    return fig


def build_fig4(data: FigureData, scale: str):
    """Return Fig. 4: reward, response length and two validation sets of the FP16 algorithm comparison."""
    columns = [
        ("Rewards", _training(data, scale, M.REWARD_Q)),
        ("Response Length", _training(data, scale, M.RESPONSE_LENGTH_Q)),
        _validation_column(data, scale, "fig4", 0),
        _validation_column(data, scale, "fig4", 1),
    ]
    fig = _algorithm_row(data, scale, "fig4", columns)
    P.add_caption(fig, FIGURE_TITLES["fig4_fp16_algorithms"], scale, CURVE_NOTE, scope=data.scope(scale))
    return fig


# --------------------------------------------------------------------------------------------- Fig. 5

def build_fig5(data: FigureData, scale: str):
    """Return Fig. 5 from the offline mismatch tool's results at ``scale``."""
    data.read_results.update(result_dirs(data.mismatch_roots, scale))
    fig = P.draw_offline_mismatch(load_offline(data.mismatch_roots, scale), scale)
    fig.suptitle(f"{FIGURE_TITLES['fig5_offline_mismatch']} — {P.scale_label(scale)}", fontsize=11)
    return fig


def build_mismatch_scaling(data: FigureData, scale: str):
    """Return the effect-study figure (beyond the paper): mismatch against model width and response length, from
    the width study's results and the first model's forced-length results at ``scale``."""
    profiles = load_profiles(data.mismatch_roots, scale)
    model = sorted(profiles)[0] if profiles else None
    dirs = profile_dirs(data.mismatch_roots, scale, model) if model else {}
    widths = width_table(data.mismatch_roots, scale)
    data.read_results.update(dirs.values())
    data.read_results.update(Path(d) for d in widths.attrs.get("sources", ()))
    natural = None
    if dirs:
        forced = read_summary(next(iter(dirs.values())))
        natural = natural_length(data.mismatch_roots, forced)
    long_dirs = natural_dirs(data.mismatch_roots, scale)
    data.read_results.update(long_dirs.values())
    fig = draw_mismatch_scaling(profiles.get(model, {}), widths, scale, natural,
                                load_natural(data.mismatch_roots, scale))
    fig.suptitle(f"{FIGURE_TITLES['effect_mismatch_scaling']} — {P.scale_label(scale)}", fontsize=11)
    return fig


# --------------------------------------------------------------------------------------------- ablation

HEATMAP_ORDER = ("bf16", "fp16", "fp32")


@dataclass
class HeatCells:
    """A train × infer heat-map (HEATMAP_ORDER on both axes): the mean over seeds per cell, the seeds behind it and,
    for a cell without a value, why."""

    values: np.ndarray
    seeds: np.ndarray
    notes: np.ndarray


def _final_reward(curve: pd.Series) -> float | None:
    trailing = trailing_mean(curve)
    return float(trailing.iloc[-1]) if len(trailing) else None


def _median(curve: pd.Series) -> float | None:
    finite = curve.dropna()
    return float(finite.median()) if len(finite) else None


def heat_cells(data: FigureData, scale: str, arms: list[ArmRuns], quantity: M.Quantity,
               summary: Callable[[pd.Series], float | None]) -> HeatCells:
    """Return the heat-map of ``summary`` (one value per seed's ``quantity`` curve, averaged over seeds) per arm."""
    n = len(HEATMAP_ORDER)
    cells = HeatCells(np.full((n, n), np.nan), np.zeros((n, n), dtype=int), np.full((n, n), "", dtype=object))
    for arm in arms:
        i, j = HEATMAP_ORDER.index(arm.arm.train), HEATMAP_ORDER.index(arm.arm.infer)
        per_seed = [v for v in map(summary, data.curves(scale, list(arm.finished), quantity)) if v is not None]
        if per_seed:
            cells.values[i, j], cells.seeds[i, j] = np.mean(per_seed), len(per_seed)
        else:
            cells.notes[i, j] = why_missing(arm, scale, quantity.label)
    return cells


def _heatmap(ax, cells: HeatCells, title: str, fmt: str, log: bool) -> None:
    import seaborn as sns
    from matplotlib.colors import LogNorm

    names = [P.PRECISION_NAMES[p] for p in HEATMAP_ORDER]
    shown = np.where(cells.values > 0, cells.values, np.nan) if log else cells.values
    missing = ~np.isfinite(shown)
    finite = shown[~missing]
    scale = {"vmin": 0.0, "vmax": 1.0}
    if finite.size and log:
        scale = {"norm": LogNorm(finite.min(), max(finite.max(), finite.min() * 10))}
    elif finite.size:
        scale = {}
    labels = np.array([[f"{format(v, fmt)}\n{P.seeds_label(n)}" if np.isfinite(v) else ""
                        for v, n in zip(row, seeds, strict=True)]
                       for row, seeds in zip(shown, cells.seeds, strict=True)], dtype=object)
    sns.heatmap(np.where(missing, 0.0, shown), mask=missing, annot=labels, fmt="", cmap="viridis",
                cbar=bool(finite.size), ax=ax, xticklabels=names, yticklabels=names, annot_kws={"fontsize": 7},
                cbar_kws={"fraction": 0.046, "pad": 0.04}, linewidths=1.5, linecolor="white", **scale)
    ax.set_facecolor("0.95")
    width = P.text_width(ax, P.NOTE_FONTSIZE, 0.8 / len(HEATMAP_ORDER))
    for i, j in np.argwhere(missing):
        note = cells.notes[i, j] or ("≤ 0 (log colour scale)" if log else "no data")
        ax.text(j + 0.5, i + 0.5, P.wrap_lines([note], width), ha="center", va="center", fontsize=P.NOTE_FONTSIZE,
                color="0.35", gid=P.NOTE_GID)
    ax.set_title(title)
    ax.grid(False)
    ax.set_xlabel("inference dtype")
    ax.set_ylabel("training dtype")


def build_ablation(data: FigureData, scale: str):
    """Return the precision ablation: reward and KL over steps per arm, and train × infer heat-maps whose cells
    give the mean over seeds and the seed count, or why the cell is empty."""
    pairs = sorted(panel_arms(data.specs(scale), "ablation"),
                   key=lambda pair: (HEATMAP_ORDER.index(pair[1].train), HEATMAP_ORDER.index(pair[1].infer)))
    arms = [data.arm_runs(scale, spec, arm, P.precision_label(arm.train, arm.infer)) for spec, arm in pairs]
    fig, axes = P.new_figure(2, 2, panel_size=(4.2, 2.8), gap=(1.4, 0.85), top=1.15, right=0.7)
    drew = [False] * len(arms)
    looks = [(P.PRECISION_COLORS.get(a.arm.train, "0.3"), P.INFER_LINESTYLES.get(a.arm.infer, "-")) for a in arms]
    for ax, quantity, log in ((axes[0, 0], M.REWARD_Q, False), (axes[0, 1], M.TOKEN_KL_Q, True)):
        ax.set_title(quantity.label)
        ax.set_xlabel(STEPS)
        if log:
            ax.set_yscale("log")
        seeds, nonpositive = [], set()
        for arm, (color, style) in zip(arms, looks, strict=True):
            curves = data.curves(scale, list(arm.finished), quantity)
            if log and any(len(c) for c in curves) and not any((c > 0).any() for c in curves):
                nonpositive.add(arm.label)  # FP32 against FP32: the KL estimate is rounding noise around 0
            seeds.append(P.draw_training_curve(ax, [c[c > 0] for c in curves] if log else curves, color, arm.label,
                                               style))
        drew = [d or bool(n) for d, n in zip(drew, seeds, strict=True)]
        finish_panel(ax, arms, seeds, scale, quantity.label, legend_has_seeds=True, nonpositive=frozenset(nonpositive))
    _heatmap(axes[1, 0], heat_cells(data, scale, arms, M.REWARD_Q, _final_reward),
             "Final training reward (trailing mean)", ".2f", False)
    _heatmap(axes[1, 1], heat_cells(data, scale, arms, M.TOKEN_KL_Q, _median), "Median KL[μ‖π] per token", ".1e",
             True)
    shared_legend(fig, arms, looks, drew, scale)
    P.add_caption(fig, FIGURE_TITLES["ablation_precision"], scale,
                  "Colour: training dtype; line style: inference dtype (solid BF16, dashed FP16, dotted FP32). "
                  "Heat-maps: mean over seeds, with the seed count. " + CURVE_NOTE, scope=data.scope(scale))
    return fig


def _by_fork_setting(spec: ExperimentSpec, arm: PrecisionArm) -> tuple[str, str, str]:
    verl_defaults = spec.variant_of is not None  # the fork-settings run is the paper's; the other is its variant
    setting = "verl defaults" if verl_defaults else "fork settings"
    return (P.PRECISION_COLORS.get(arm.train, "0.3"), "--" if verl_defaults else "-",
            f"{P.precision_label(arm.train, arm.infer)} ({setting})")


def build_fork_ablation(data: FigureData, scale: str):
    """Return the fork-changes ablation: reward, first validation set and token KL of the ``fork_ablation`` runs,
    colour by precision, solid for the fork's settings (the paper's runs) and dashed for verl's defaults."""
    columns = [
        ("Rewards", _training(data, scale, M.REWARD_Q)),
        _validation_column(data, scale, FORK_ABLATION_PANEL, 0),
        ("KL[μ‖π] per token", _training(data, scale, M.TOKEN_KL_Q, log=True)),
    ]
    fig = _algorithm_row(data, scale, FORK_ABLATION_PANEL, columns, look=_by_fork_setting)
    P.add_caption(fig, FIGURE_TITLES["ablation_fork_changes"], scale,
                  "Fork settings: weight decay 0, betas (0.9, 0.95), eps 1e-15, Dr.GRPO loss, no std normalisation "
                  "(sanity/grpo); verl defaults: 0.01, (0.9, 0.999), 1e-8, token mean, std-normalised "
                  "(ablation/fork_changes). " + CURVE_NOTE, scope=data.scope(scale))
    return fig


FIGURES: dict[str, Callable] = {
    "fig1_training_reward": build_fig1,
    "fig2_eval_accuracy": build_fig2,
    "fig3_mismatch_dynamics": build_fig3,
    "fig4_fp16_algorithms": build_fig4,
    "fig5_offline_mismatch": build_fig5,
    "ablation_precision": build_ablation,
    "ablation_fork_changes": build_fork_ablation,
    "effect_mismatch_scaling": build_mismatch_scaling,
    **{name: partial(build_mismatch_ladder, ladder=ladder) for name, ladder in LADDERS.items()},
    "effect_ladder_algorithms": build_ladder_algorithms,
}
# Figures drawn in a profile of their own at tiny scale, whatever the others' (the ladder's runs are quick-profile).
FIGURE_PROFILES = {**dict.fromkeys(LADDERS, QUICK), "effect_ladder_algorithms": QUICK}
# Tiny figures drawn a second time in the quick profile (into QUICK_FIGURES_DIR by `make published-results`), where the
# stand-ins' quick runs are drawn beside the calibrated runs' first steps.
QUICK_VERSIONS = ("fig1_training_reward", "fig2_eval_accuracy")


RUN_SOURCES = "runs.json"  # beside the figures of a scale: figure name -> the run directories it drew from


def figure_path(out_dir: Path, scale: str, name: str) -> Path:
    """Return where figure ``name`` at ``scale`` is written: ``<out_dir>/<scale>/<name>.png`` (PDF beside it)."""
    return Path(out_dir) / scale / f"{name}.png"


def _check_known(names, scales) -> None:
    """Raise a UserError naming the first unknown figure or scale."""
    for name in names:
        if name not in FIGURES:
            raise UserError(f"unknown figure {name!r}: choose one of {', '.join(FIGURES)}")
    for scale in scales:
        if scale not in SCALES:
            raise UserError(f"unknown scale {scale!r}: choose one of {', '.join(SCALES)}")


def draw_figure(data: FigureData, name: str, scale: str, png_path: Path) -> tuple[Path, Path]:
    """Draw figure ``name`` at ``scale`` and save it as PNG and PDF; return both paths.

    The runs it drew from are recorded under the figure's name in ``runs.json`` beside it (RUN_SOURCES).
    """
    _check_known([name], [scale])
    view = data.with_profile(FIGURE_PROFILES.get(name, data.profile))
    view.read.clear()
    view.read_results.clear()
    written = P.save_figure(FIGURES[name](view, scale), png_path)
    record = Path(png_path).with_name(RUN_SOURCES)
    sources = json.loads(record.read_text()) if record.is_file() else {}
    sources[name] = view.sources(view.read, view.read_results)
    atomic_write_json(record, dict(sorted(sources.items())))
    return written


def draw_all(data: FigureData, out_dir: Path, scales=SCALES, names=None) -> list[Path]:
    """Draw every figure at every scale into ``out_dir`` with a progress bar; return the PNG paths."""
    names = list(names or FIGURES)
    _check_known(names, scales)
    jobs = [(scale, name) for scale in scales for name in names]
    written = []
    for scale, name in tqdm(jobs, desc="figures", unit="fig", disable=None):
        written.append(draw_figure(data, name, scale, figure_path(out_dir, scale, name))[0])
    return written
