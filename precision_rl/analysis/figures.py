"""The paper's figures, built from the tidy table and the registry (docs/figures.md).

Which experiments and precision arms feed a panel comes from each spec's ``paper`` list (``fig1a``,
``fig3:bf16``, ``ablation``): nothing here names an experiment. Panel titles are derived from the experiment's
family and algorithm through the label mappings below, the only place such titles live. Every figure is drawn
per scale; a panel without runs says "no runs", one whose runs lack the metric says "no data".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from precision_rl import metrics as M
from precision_rl.analysis import plotting as P
from precision_rl.analysis.logs import RunTable
from precision_rl.analysis.mismatch_results import load_offline, read_summary, result_dirs
from precision_rl.analysis.mismatch_scaling import (
    draw_mismatch_scaling,
    load_profiles,
    natural_length,
    profile_dirs,
    width_table,
)
from precision_rl.analysis.series import SeriesIndex, trailing_mean
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.registry import ExperimentSpec, load_all
from precision_rl.config.scale import SCALES
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_json
from precision_rl.paths import REPO_ROOT

FAMILY_LABELS = {"sanity": "Sanity", "octothinker": "OctoThinker", "lora": "LoRA", "moe": "MoE",
                 "dense14b": "Dense-14B", "ablation": "Ablation"}
ALGORITHM_LABELS = {"grpo": "GRPO", "grpo_token_tis": "GRPO-Token-TIS", "grpo_seq_mis": "GRPO-Seq-MIS",
                    "gspo": "GSPO", "pg_seq_is": "PG-Seq-IS", "pg_seq_tis": "PG-Seq-TIS", "pg_seq_mis": "PG-Seq-MIS",
                    "dapo": "DAPO"}
DATASET_LABELS = {"aime24": "AIME 2024", "aime25": "AIME 2025", "math500": "MATH500"}
FIGURE_TITLES = {
    "fig1_training_reward": "Fig. 1: training reward, BF16 vs FP16",
    "fig2_eval_accuracy": "Fig. 2: evaluation accuracy, BF16 vs FP16",
    "fig3_mismatch_dynamics": "Fig. 3: BF16 algorithms vs FP16 PG-Seq-IS",
    "fig4_fp16_algorithms": "Fig. 4: FP16 algorithm comparison",
    "fig5_offline_mismatch": "Fig. 5: offline mismatch",
    "ablation_precision": "Precision ablation: training × inference dtype",
    "ablation_fork_changes": "FP16 vs BF16 with and without the fork's optimizer and loss changes",
    "effect_mismatch_scaling": "Beyond the paper: mismatch against model width and response length",
}
FORK_ABLATION_PANEL = "fork_ablation"
CURVE_NOTE = ("Training curves: faint = raw per-step value (mean over seeds), bold = EMA (span 5 % of the steps); "
              "evaluation curves are unsmoothed points. Band: min–max over seeds, where an arm has several.")
STEPS = "Training steps"


@dataclass
class FigureData:
    """Everything a figure reads: the table, its series index, the registry per scale, the mismatch results (one
    folder or several; where two hold the same result, the first is drawn)."""

    table: RunTable
    mismatch_roots: Path | Sequence[Path]
    index: SeriesIndex = field(init=False)
    _specs: dict[str, dict[str, ExperimentSpec]] = field(default_factory=dict, init=False)
    _runs: dict[tuple, list[str]] = field(default_factory=dict, init=False)
    _sources: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    read: set[tuple[str, str]] = field(default_factory=set, init=False)  # (scale, run) pairs a figure drew from
    read_results: set[Path] = field(default_factory=set, init=False)  # mismatch result folders a figure drew from

    def __post_init__(self):
        roots = [self.mismatch_roots] if isinstance(self.mismatch_roots, (str, Path)) else self.mismatch_roots
        self.mismatch_roots = tuple(Path(r) for r in roots)
        self.index = SeriesIndex(self.table.metrics)
        runs = self.table.runs.sort_values(["seed", "run"]) if len(self.table.runs) else self.table.runs
        for row in runs.itertuples(index=False):
            key = (str(row.scale), str(row.experiment), str(row.precision_train), str(row.precision_infer))
            self._runs.setdefault(key, []).append(str(row.run))
            self._sources[(str(row.scale), str(row.run))] = str(row.source)

    def specs(self, scale: str) -> dict[str, ExperimentSpec]:
        """Return the registry at ``scale`` (loaded once)."""
        if scale not in self._specs:
            self._specs[scale] = load_all(scale)
        return self._specs[scale]

    def runs(self, scale: str, experiment: str, arm: PrecisionArm) -> list[str]:
        """Return the names of the runs (one per seed) of ``experiment``'s ``arm`` at ``scale``; note them as read."""
        names = self._runs.get((scale, experiment, arm.train, arm.infer), [])
        self.read.update((scale, name) for name in names)
        return names

    def sources(self, pairs, result_dirs=()) -> list[str]:
        """Return where the runs of ``pairs`` (scale, run) were read from, and the mismatch ``result_dirs``, relative
        to the repository, sorted."""
        out = []
        for path in [Path(self._sources.get(pair, pair[1])) for pair in pairs] + [Path(d) for d in result_dirs]:
            out.append(str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path))
        return sorted(out)

    def curves(self, scale: str, runs: list[str], quantity: M.Quantity) -> list[pd.Series]:
        """Return ``quantity``'s series of each run that logged it."""
        out = [self.index.quantity(scale, r, quantity) for r in runs]
        return [c for c in out if c is not None and not c.empty]

    def val_curves(self, scale: str, runs: list[str], data_source: str) -> tuple[list[pd.Series], str | None]:
        """Return each run's validation accuracy series on ``data_source`` and the metric name found."""
        out, found = [], None
        for run in runs:
            name = M.val_metric(self.index.logged(scale, run), data_source)
            if name:
                series = self.index.get(scale, run, name)
                if series is not None and not series.empty:
                    out.append(series)
                    found = found or name
        return out, found


# --------------------------------------------------------------------------------------------- panels

def panel_ids(specs: dict[str, ExperimentSpec], prefix: str) -> list[str]:
    """Return the panel ids (e.g. fig1a … fig1l) that registry experiments name with ``prefix``, sorted."""
    pattern = re.compile(rf"^{re.escape(prefix)}[a-z]$")
    return sorted({ref.panel for spec in specs.values() for ref in spec.paper if pattern.match(ref.panel)})


def panel_arms(specs: dict[str, ExperimentSpec], panel: str) -> list[tuple[ExperimentSpec, PrecisionArm]]:
    """Return the (experiment, arm) pairs feeding ``panel``; ``fig3:bf16`` keeps only the bf16 arm."""
    return [(spec, arm) for spec in specs.values() for arm in spec.panel_arms(panel)]


def experiment_title(spec: ExperimentSpec) -> str:
    """Return a panel title for ``spec``: its family and algorithm, e.g. "Sanity GRPO-Token-TIS"."""
    family = FAMILY_LABELS.get(spec.family, spec.family)
    return f"{family} {ALGORITHM_LABELS.get(spec.algorithm, spec.algorithm)}"


def dataset_label(name: str) -> str:
    """Return how figures name a validation set (e.g. "AIME 2024")."""
    return DATASET_LABELS.get(name, name)


def _arm_name(spec: ExperimentSpec, arm: PrecisionArm) -> str:
    return f"{P.precision_label(arm.train, arm.infer)} {ALGORITHM_LABELS.get(spec.algorithm, spec.algorithm)}"


def _finish_panel(ax, drew_any: bool, had_runs: bool, what: str, missing: str = "") -> None:
    if not had_runs:
        P.mark_empty(ax, f"{P.NO_RUNS}: {missing}" if missing else P.NO_RUNS)
    elif not drew_any:
        P.mark_empty(ax, f"no data ({what} not logged)")


def grid_command(experiments: list[str], scale: str) -> str:
    """Return the ``make grid`` command that runs ``experiments`` at ``scale`` (paper scale needs GPU nodes)."""
    selector = " ".join(sorted(set(experiments)))
    return f"make grid GRID='{selector}'" + (" SCALE=paper (GPU nodes)" if scale == "paper" else "")


def seed_note(counts: dict[str, int], missing: list[str]) -> str:
    """Return a panel's seed line: how many seeds each drawn arm has, and the arms without a run."""
    parts = [f"{label} {n}" for label, n in counts.items()]
    note = f"seeds: {', '.join(parts)}" if parts else ""
    if missing:
        note += ("; " if note else "") + f"{', '.join(missing)}: not run yet"
    return note


# --------------------------------------------------------------------------------------------- Fig. 1 / 2

def _grid(data: FigureData, scale: str, prefix: str, draw_panel: Callable, what: str) -> tuple:
    specs = data.specs(scale)
    panels = panel_ids(specs, prefix)
    ncols = 4
    nrows = max(1, -(-len(panels) // ncols))
    fig, axes = P.new_figure(nrows, ncols)
    legend: dict[str, tuple] = {}
    for k, ax in enumerate(axes.flat):
        if k >= len(panels):
            ax.axis("off")
            continue
        pairs = panel_arms(specs, panels[k])
        titles = sorted({experiment_title(s) for s, _ in pairs})
        ax.set_title(f"({panels[k][len(prefix):]}) {' / '.join(titles)}")
        had_runs = drew = False
        counts: dict[str, int] = {}
        missing: list[str] = []
        for spec, arm in pairs:
            runs = data.runs(scale, spec.name, arm)
            had_runs |= bool(runs)
            label = P.precision_label(arm.train, arm.infer)
            color = P.PRECISION_COLORS.get(arm.train, "0.3")
            if draw_panel(ax, spec, arm, runs, color):
                drew = True
                legend[label] = (color, "-")
                counts[label] = len(runs)
            elif not runs:
                missing.append(label)
        ax.set_xlabel(STEPS)
        _finish_panel(ax, drew, had_runs, what, grid_command([s.name for s, _ in pairs], scale))
        if drew:
            P.corner_note(ax, seed_note(counts, missing))
    return fig, axes, legend


def build_fig1(data: FigureData, scale: str):
    """Return Fig. 1: the training-reward grid (one panel per fig1* panel of the registry)."""
    def draw(ax, spec, arm, runs, color):
        ax.set_ylabel(M.REWARD_Q.label)
        return P.draw_training_curve(ax, data.curves(scale, runs, M.REWARD_Q), color,
                                     P.precision_label(arm.train, arm.infer))

    fig, _, legend = _grid(data, scale, "fig1", draw, M.REWARD)
    P.figure_legend(fig, legend)
    P.add_caption(fig, FIGURE_TITLES["fig1_training_reward"], scale, f"y: {M.REWARD}. {CURVE_NOTE}")
    return fig


def build_fig2(data: FigureData, scale: str):
    """Return Fig. 2: the evaluation-accuracy grid (each experiment's first validation set)."""
    def draw(ax, spec, arm, runs, color):
        if not spec.data.val:
            return False
        curves, name = data.val_curves(scale, runs, spec.data.val[0])
        if name:
            ax.set_ylabel(f"{dataset_label(spec.data.val[0])} {name.rsplit('/', 1)[-1]}")
        return P.draw_eval_curve(ax, curves, color, P.precision_label(arm.train, arm.infer))

    fig, _, legend = _grid(data, scale, "fig2", draw, "validation accuracy")
    P.figure_legend(fig, legend)
    P.add_caption(fig, FIGURE_TITLES["fig2_eval_accuracy"], scale,
                  "y: val-core/<first validation set>/acc/mean@n, unsmoothed. " + CURVE_NOTE)
    return fig


# --------------------------------------------------------------------------------------------- Fig. 3 / 4

def _by_algorithm(spec: ExperimentSpec, arm: PrecisionArm) -> tuple[str, str, str]:
    return P.ALGORITHM_COLORS.get(spec.algorithm, "0.3"), "-", _arm_name(spec, arm)


def _algorithm_row(data: FigureData, scale: str, panel: str, columns: list[tuple[str, Callable]],
                   look: Callable = _by_algorithm):
    """Return a one-row figure of ``columns`` over the runs of ``panel``; ``look`` gives each (experiment, arm) its
    colour, line style and label (default: colour by algorithm)."""
    specs = data.specs(scale)
    pairs = panel_arms(specs, panel)
    fig, axes = P.new_figure(1, len(columns), panel_size=(3.0, 2.4))
    legend: dict[str, tuple] = {}
    for c, (title, draw) in enumerate(columns):
        ax = axes[0, c]
        ax.set_title(title)
        ax.set_xlabel(STEPS)
        had_runs = drew = False
        for spec, arm in pairs:
            runs = data.runs(scale, spec.name, arm)
            had_runs |= bool(runs)
            color, style, label = look(spec, arm)
            if runs and draw(ax, spec, arm, runs, color, label, style):
                drew = True
                legend[label] = (color, style)
        _finish_panel(ax, drew, had_runs, title)
    P.figure_legend(fig, legend)
    return fig


def _training(data, scale, quantity, ylabel=None, log=False):
    def draw(ax, spec, arm, runs, color, label, style):
        ax.set_ylabel(ylabel or quantity.label)
        if log:
            ax.set_yscale("log")
        curves = data.curves(scale, runs, quantity)
        if log:
            curves = [c[c > 0] for c in curves]
        return P.draw_training_curve(ax, curves, color, label, style)
    return draw


def _validation(data, scale, k):
    def draw(ax, spec, arm, runs, color, label, style):
        if len(spec.data.val) <= k:
            return False
        curves, name = data.val_curves(scale, runs, spec.data.val[k])
        if name:
            ax.set_ylabel(name.rsplit("/", 2)[-2] + "/" + name.rsplit("/", 1)[-1])
        return P.draw_eval_curve(ax, curves, color, label, style)
    return draw


def _val_title(data: FigureData, scale: str, panel: str, k: int) -> str:
    names = sorted({s.data.val[k] for s, _ in panel_arms(data.specs(scale), panel) if len(s.data.val) > k})
    return " / ".join(dataset_label(n) for n in names) if names else f"validation set {k + 1} (none at this scale)"


def _max_min(data, scale):
    def draw(ax, spec, arm, runs, color, label, style):
        ax.set_ylabel("π − μ")
        hi = data.curves(scale, runs, M.PROBS_DIFF_MAX_Q)
        lo = data.curves(scale, runs, M.PROBS_DIFF_MIN_Q)
        drew = P.draw_training_curve(ax, hi, color, label, style, raw=False)
        drew |= P.draw_training_curve(ax, lo, color, "_" + label, style, raw=False)
        if drew and not any(line.get_label() == "No mismatch" for line in ax.get_lines()):
            zero = ax.axhline(0.0, color="red", linestyle="--", linewidth=1, label="No mismatch")
            ax.legend(handles=[zero], loc="lower left")
        return drew
    return draw


def build_fig3(data: FigureData, scale: str):
    """Return Fig. 3: reward, validation accuracy and mismatch of the fig3 runs (BF16 algorithms vs FP16 PG-Seq-IS)."""
    columns = [
        ("Rewards", _training(data, scale, M.REWARD_Q)),
        (_val_title(data, scale, "fig3", 0), _validation(data, scale, 0)),
        ("Mean[Abs(π − μ)]", _training(data, scale, M.MEAN_ABS_DIFF_Q)),
        ("KL[μ‖π] per token", _training(data, scale, M.TOKEN_KL_Q, log=True)),
        ("Max & Min of π − μ", _max_min(data, scale)),
    ]
    fig = _algorithm_row(data, scale, "fig3", columns)
    P.add_caption(fig, FIGURE_TITLES["fig3_mismatch_dynamics"], scale,
                  f"Mismatch: {M.PROBS_DIFF_ABS_MEAN}; KL: {M.TOKEN_KL_K3} (k3; k1 {M.TOKEN_KL_K1} where k3 is "
                  f"absent; actor/ prefix in bypass mode), log axis; max/min: {M.PROBS_DIFF_MAX}, {M.PROBS_DIFF_MIN}. "
                  + CURVE_NOTE)
    return fig


def build_fig4(data: FigureData, scale: str):
    """Return Fig. 4: reward, response length and two validation sets of the FP16 algorithm comparison."""
    columns = [
        ("Rewards", _training(data, scale, M.REWARD_Q)),
        ("Response Length", _training(data, scale, M.RESPONSE_LENGTH_Q)),
        (_val_title(data, scale, "fig4", 0), _validation(data, scale, 0)),
        (_val_title(data, scale, "fig4", 1), _validation(data, scale, 1)),
    ]
    fig = _algorithm_row(data, scale, "fig4", columns)
    P.add_caption(fig, FIGURE_TITLES["fig4_fp16_algorithms"], scale, CURVE_NOTE)
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
    fig = draw_mismatch_scaling(profiles.get(model, {}), widths, scale, natural)
    fig.suptitle(f"{FIGURE_TITLES['effect_mismatch_scaling']} — {P.scale_label(scale)}", fontsize=11)
    return fig


# --------------------------------------------------------------------------------------------- ablation

HEATMAP_ORDER = ("bf16", "fp16", "fp32")


def _ablation_cells(data: FigureData, scale: str, pairs) -> dict[str, np.ndarray]:
    n = len(HEATMAP_ORDER)
    reward, kl = np.full((n, n), np.nan), np.full((n, n), np.nan)
    for spec, arm in pairs:
        runs = data.runs(scale, spec.name, arm)
        i, j = HEATMAP_ORDER.index(arm.train), HEATMAP_ORDER.index(arm.infer)
        finals = [float(t.iloc[-1]) for t in map(trailing_mean, data.curves(scale, runs, M.REWARD_Q)) if len(t)]
        medians = [float(c.median()) for c in data.curves(scale, runs, M.TOKEN_KL_Q)]
        reward[i, j] = np.mean(finals) if finals else np.nan
        kl[i, j] = np.mean(medians) if medians else np.nan
    return {"reward": reward, "kl": kl}


def _heatmap(ax, values: np.ndarray, title: str, fmt: str, log: bool, any_runs: np.ndarray) -> None:
    import seaborn as sns
    from matplotlib.colors import LogNorm

    names = [P.PRECISION_NAMES[p] for p in HEATMAP_ORDER]
    shown = np.where(values > 0, values, np.nan) if log else values
    missing = ~np.isfinite(shown)
    finite = shown[~missing]
    scale = {"vmin": 0.0, "vmax": 1.0}
    if finite.size and log:
        scale = {"norm": LogNorm(finite.min(), max(finite.max(), finite.min() * 10))}
    elif finite.size:
        scale = {}
    labels = np.array([[format(v, fmt) if np.isfinite(v) else "" for v in row] for row in shown], dtype=object)
    sns.heatmap(np.where(missing, 0.0, shown), mask=missing, annot=labels, fmt="", cmap="viridis",
                cbar=bool(finite.size), ax=ax, xticklabels=names, yticklabels=names, annot_kws={"fontsize": 7},
                cbar_kws={"fraction": 0.046, "pad": 0.04}, **scale)
    for i, j in np.argwhere(missing):
        ax.text(j + 0.5, i + 0.5, P.NO_RUNS if not any_runs[i, j] else "no data", ha="center", va="center",
                fontsize=7, color="0.4")
    ax.set_title(title)
    ax.grid(False)
    ax.set_xlabel("inference dtype")
    ax.set_ylabel("training dtype")


def build_ablation(data: FigureData, scale: str):
    """Return the precision ablation: reward and KL over steps per arm, and train × infer heat-maps."""
    pairs = panel_arms(data.specs(scale), "ablation")
    fig, axes = P.new_figure(2, 2, panel_size=(4.2, 2.8), gap=(1.4, 0.85), top=1.15, right=0.7)
    legend: dict[str, tuple] = {}
    any_runs = np.zeros((len(HEATMAP_ORDER), len(HEATMAP_ORDER)), dtype=bool)
    for ax, quantity, log in ((axes[0, 0], M.REWARD_Q, False), (axes[0, 1], M.TOKEN_KL_Q, True)):
        ax.set_title(quantity.label)
        ax.set_xlabel(STEPS)
        had_runs = drew = False
        for spec, arm in pairs:
            runs = data.runs(scale, spec.name, arm)
            any_runs[HEATMAP_ORDER.index(arm.train), HEATMAP_ORDER.index(arm.infer)] |= bool(runs)
            had_runs |= bool(runs)
            curves = data.curves(scale, runs, quantity)
            if log:
                ax.set_yscale("log")
                curves = [c[c > 0] for c in curves]
            color = P.PRECISION_COLORS.get(arm.train, "0.3")
            style = P.INFER_LINESTYLES.get(arm.infer, "-")
            if P.draw_training_curve(ax, curves, color, P.precision_label(arm.train, arm.infer), style):
                drew = True
                legend[P.precision_label(arm.train, arm.infer)] = (color, style)
        _finish_panel(ax, drew, had_runs, quantity.label)
    cells = _ablation_cells(data, scale, pairs)
    _heatmap(axes[1, 0], cells["reward"], "Final training reward (trailing mean)", ".2f", False, any_runs)
    _heatmap(axes[1, 1], cells["kl"], "Median KL[μ‖π] per token", ".1e", True, any_runs)
    P.figure_legend(fig, legend)
    P.add_caption(fig, FIGURE_TITLES["ablation_precision"], scale,
                  "Colour: training dtype; line style: inference dtype (solid BF16, dashed FP16, dotted FP32). "
                  "Heat-maps: mean over seeds. " + CURVE_NOTE)
    return fig


def _by_fork_setting(spec: ExperimentSpec, arm: PrecisionArm) -> tuple[str, str, str]:
    verl_defaults = spec.variant_of is not None  # the fork-settings run is the paper's; the other is its variant
    setting = "verl defaults" if verl_defaults else "fork settings"
    return (P.PRECISION_COLORS.get(arm.train, "0.3"), "--" if verl_defaults else "-",
            f"{P.precision_label(arm.train, arm.infer)}, {setting}")


def build_fork_ablation(data: FigureData, scale: str):
    """Return the fork-changes ablation: reward, first validation set and token KL of the ``fork_ablation`` runs,
    colour by precision, solid for the fork's settings (the paper's runs) and dashed for verl's defaults."""
    columns = [
        ("Rewards", _training(data, scale, M.REWARD_Q)),
        (_val_title(data, scale, FORK_ABLATION_PANEL, 0), _validation(data, scale, 0)),
        ("KL[μ‖π] per token", _training(data, scale, M.TOKEN_KL_Q, log=True)),
    ]
    fig = _algorithm_row(data, scale, FORK_ABLATION_PANEL, columns, look=_by_fork_setting)
    P.add_caption(fig, FIGURE_TITLES["ablation_fork_changes"], scale,
                  "Fork settings: weight decay 0, betas (0.9, 0.95), eps 1e-15, Dr.GRPO loss, no std normalisation "
                  "(sanity/grpo); verl defaults: 0.01, (0.9, 0.999), 1e-8, token mean, std-normalised "
                  "(ablation/fork_changes). " + CURVE_NOTE)
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
}


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
    data.read.clear()
    data.read_results.clear()
    written = P.save_figure(FIGURES[name](data, scale), png_path)
    record = Path(png_path).with_name(RUN_SOURCES)
    sources = json.loads(record.read_text()) if record.is_file() else {}
    sources[name] = data.sources(data.read, data.read_results)
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
