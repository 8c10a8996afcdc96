"""The one plotting module: style, colours, curve drawing (faint raw + bold EMA, seed bands), the "no runs" panel,
captions that name the scale, atomic PNG + PDF saving, and the drawing of Fig. 5 (offline mismatch).

Colours follow the paper (docs/figures.md#styling): BF16 blue, FP16 green (FP32 a third colour); in
multi-algorithm plots tab10 in the order GRPO, Token-TIS, Seq-MIS, GSPO, PG-Seq-IS (algorithms.ALGORITHMS order).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from precision_rl.analysis.series import aggregate, ema  # noqa: E402
from precision_rl.config.algorithms import ALGORITHMS  # noqa: E402
from precision_rl.fileio import atomic_path  # noqa: E402

SCALE_LABELS = {"paper": "paper scale (GPU)", "tiny": "tiny scale (CPU)"}
PRECISION_COLORS = {"bf16": "#1f77b4", "fp16": "#2ca02c", "fp32": "#ff7f0e"}
PRECISION_NAMES = {"bf16": "BF16", "fp16": "FP16", "fp32": "FP32"}
# In the precision ablation the colour is the training dtype and the line style the inference dtype.
INFER_LINESTYLES = {"bf16": "-", "fp16": "--", "fp32": ":"}
_TAB10 = plt.get_cmap("tab10").colors
ALGORITHM_COLORS = {name: _TAB10[i % 10] for i, name in enumerate(ALGORITHMS)}
NO_RUNS = "no runs"
RAW_ALPHA = 0.25
BAND_ALPHA = 0.18
DPI = 150


def setup_style() -> None:
    """Apply the figures' matplotlib style (small fonts, light grid, no top/right spines)."""
    plt.rcParams.update({
        "font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
        "ytick.labelsize": 7, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
        "axes.spines.right": False, "figure.dpi": DPI, "savefig.dpi": DPI,
    })


def scale_label(scale: str) -> str:
    """Return how captions name ``scale`` (e.g. "tiny scale (CPU)")."""
    return SCALE_LABELS.get(scale, f"{scale} scale")


def precision_label(train: str, infer: str) -> str:
    """Return the legend name of a precision arm: "FP16", or "train BF16 / infer FP32"."""
    if train == infer:
        return PRECISION_NAMES.get(train, train)
    return f"train {PRECISION_NAMES.get(train, train)} / infer {PRECISION_NAMES.get(infer, infer)}"


# Fixed layout in inches (no tight_layout: it measures every text and took most of the drawing time).
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 0.65, 0.2, 0.85, 0.95
GAP_W, GAP_H = 0.75, 0.75


def new_figure(nrows: int, ncols: int, panel_size: tuple[float, float] = (3.0, 2.2),
               gap: tuple[float, float] = (GAP_W, GAP_H), top: float = MARGIN_TOP,
               right: float = MARGIN_RIGHT) -> tuple[plt.Figure, np.ndarray]:
    """Return a figure and its 2-D array of axes on a fixed grid, with room on top (title, legend) and at the
    bottom (caption); sizes in inches."""
    setup_style()
    w, h = panel_size
    width = MARGIN_LEFT + right + ncols * w + (ncols - 1) * gap[0]
    height = top + MARGIN_BOTTOM + nrows * h + (nrows - 1) * gap[1]
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(left=MARGIN_LEFT / width, right=1 - right / width, top=1 - top / height,
                        bottom=MARGIN_BOTTOM / height, wspace=gap[0] / w, hspace=gap[1] / h)
    return fig, axes


def mark_empty(ax: plt.Axes, text: str = NO_RUNS) -> None:
    """Write ``text`` (default "no runs") across an empty panel and hide its ticks."""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 28)), transform=ax.transAxes, ha="center", va="center",
            fontsize=9, color="0.45")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def corner_note(ax: plt.Axes, text: str) -> None:
    """Write a small note (a panel's seed counts) in the lower-right corner of a drawn panel."""
    if text:
        ax.text(0.98, 0.03, "\n".join(textwrap.wrap(text, 40)), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=7, color="0.3", bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.8", "alpha": 0.8})


def panel_note(ax: plt.Axes) -> str | None:
    """Return the "no runs"/"no data" text of a panel marked empty, or None (tests and callers use it)."""
    for text in ax.texts:
        if text.get_text().startswith((NO_RUNS, "no data")):
            return text.get_text()
    return None


def draw_training_curve(ax: plt.Axes, curves: list[pd.Series], color, label: str, linestyle: str = "-",
                        raw: bool = True) -> bool:
    """Draw one arm's training curve: faint raw mean, bold EMA mean, min–max band over seeds' EMAs.

    ``curves`` holds one series per seed. Returns False (drawing nothing) when no curve has data.
    """
    curves = [c for c in curves if c is not None and not c.empty]
    if not curves:
        return False
    band = aggregate([ema(c) for c in curves])
    if raw:
        raw_mean = aggregate(curves)
        ax.plot(raw_mean.steps, raw_mean.mean, color=color, alpha=RAW_ALPHA, linewidth=0.7, linestyle=linestyle)
    if band.n_seeds > 1:
        ax.fill_between(band.steps, band.low, band.high, color=color, alpha=BAND_ALPHA, linewidth=0)
        label = f"{label} (n={band.n_seeds})"
    ax.plot(band.steps, band.mean, color=color, linewidth=1.6, label=label, linestyle=linestyle)
    return True


def draw_eval_curve(ax: plt.Axes, curves: list[pd.Series], color, label: str, linestyle: str = "-") -> bool:
    """Draw one arm's evaluation curve: unsmoothed points at each evaluation, mean and min–max band over seeds."""
    band = aggregate(curves)
    if band is None:
        return False
    if band.n_seeds > 1:
        ax.fill_between(band.steps, band.low, band.high, color=color, alpha=BAND_ALPHA, linewidth=0)
        label = f"{label} (n={band.n_seeds})"
    ax.plot(band.steps, band.mean, color=color, linewidth=1.2, marker="o", markersize=2.5, label=label,
            linestyle=linestyle)
    return True


def add_caption(fig: plt.Figure, title: str, scale: str, notes: str = "") -> None:
    """Put the figure title (with the scale) on top and a caption naming the scale and smoothing at the bottom."""
    width = fig.get_figwidth()
    fig.suptitle(f"{title} — {scale_label(scale)}", fontsize=11, x=0.5, y=1 - 0.12 / fig.get_figheight(),
                 va="top")
    caption = f"Scale: {scale_label(scale)}." + (f" {notes}" if notes else "")
    lines = textwrap.wrap(caption, max(40, int(width * 17)))  # ~17 characters per inch at 7 pt
    fig.text(0.08 / width, 0.06 / fig.get_figheight(), "\n".join(lines[:3]), ha="left", va="bottom", fontsize=7,
             color="0.3")


def figure_legend(fig: plt.Figure, handles_labels: dict[str, tuple]) -> None:
    """Draw one legend for the whole figure from label → (color, linestyle)."""
    if not handles_labels:
        return
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, linestyle=ls, linewidth=1.8) for c, ls in handles_labels.values()]
    fig.legend(handles, list(handles_labels), loc="upper center", ncol=min(len(handles), 6), frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.38 / fig.get_figheight()))


def save_figure(fig: plt.Figure, png_path: Path) -> tuple[Path, Path]:
    """Save ``fig`` as PNG at ``png_path`` and as PDF beside it, each atomically; close it; return both paths."""
    png_path = Path(png_path)
    if png_path.suffix.lower() != ".png":
        raise ValueError(f"figure path must end in .png: {png_path}")
    pdf_path = png_path.with_suffix(".pdf")
    for path, fmt in ((png_path, "png"), (pdf_path, "pdf")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt)
    plt.close(fig)
    return png_path, pdf_path


# --------------------------------------------------------------------------------------------- Fig. 5

@dataclass
class OfflineMismatch:
    """What Fig. 5 draws for one (model, dtype) pair of the offline mismatch tool."""

    model: str
    dtype: str
    mu: np.ndarray  # token probabilities under the inference engine (subsample)
    pi: np.ndarray  # the same tokens under the training engine
    lengths: np.ndarray  # response tokens per sequence
    log_ratio: np.ndarray  # Σ_t (log π − log μ) per sequence
    slope_per_1k: float
    seq_kl: float


def _dtype_panel(ax: plt.Axes, data: OfflineMismatch | None, dtype: str, title: str) -> str | None:
    """Title a Fig. 5 panel of one dtype; return the dtype's colour, or None (panel marked empty) without data."""
    ax.set_title(f"{title} ({PRECISION_NAMES.get(dtype, dtype)})")
    if data is None or not len(data.lengths):
        mark_empty(ax)
        return None
    return PRECISION_COLORS.get(dtype, "0.3")


def draw_token_scatter(ax: plt.Axes, data: OfflineMismatch | None, dtype: str) -> None:
    """Draw Fig. 5's scatter of π against μ for one dtype with the dashed "no mismatch" diagonal."""
    color = _dtype_panel(ax, data, dtype, "Token Probability")
    if color is None:
        return
    ax.scatter(data.mu, data.pi, s=2, alpha=0.35, color=color, linewidths=0, rasterized=True)
    ax.plot([0, 1], [0, 1], linestyle="--", color="0.2", linewidth=1, label="No mismatch (π=μ)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("inference probability μ")
    ax.set_ylabel("training probability π")
    ax.legend(loc="upper left")


def draw_seq_mismatch(ax: plt.Axes, data: OfflineMismatch | None, dtype: str) -> None:
    """Draw Fig. 5's per-sequence log(π/μ) against length (K tokens) with the least-squares line and a text box."""
    color = _dtype_panel(ax, data, dtype, "Seq mismatch v.s. Len")
    if color is None:
        return
    x = data.lengths / 1000.0
    ax.scatter(x, data.log_ratio, s=4, alpha=0.4, color=color, linewidths=0, rasterized=True)
    ax.axhline(0.0, linestyle="--", color="0.4", linewidth=1)
    if len(x) >= 2 and np.ptp(x) > 0:
        grid = np.linspace(0, x.max(), 50)
        intercept = np.polyfit(x, data.log_ratio, 1)[1]
        ax.plot(grid, data.slope_per_1k * grid + intercept, color="black", linewidth=1.3)
    ax.text(0.03, 0.05, f"Slope = {data.slope_per_1k:.3g}, KL[μ|π] = {data.seq_kl:.3g}", transform=ax.transAxes,
            fontsize=8, bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "0.6"})
    ax.set_xlabel("response length (K tokens)")
    ax.set_ylabel("log(π/μ) per sequence")


def draw_offline_mismatch(rows: dict[str, dict[str, OfflineMismatch]], scale: str,
                          default_dtypes: tuple[str, ...] = ("bf16", "fp16")) -> plt.Figure:
    """Return Fig. 5: per model (row), token scatters for each self-pair dtype, then the sequence panels.

    ``rows`` maps model → dtype → data. With no data at all, one row of "no runs" panels for ``default_dtypes``
    is drawn. Sequence panels share one y-range per row, as the paper's do.
    """
    models = sorted(rows) or [None]
    width = max([len(rows[m]) for m in rows] + [len(default_dtypes)])
    fig, axes = new_figure(len(models), 2 * width, panel_size=(3.2, 2.9))
    for r, model in enumerate(models):
        per_dtype = rows.get(model, {}) if model else {}
        dtypes = [d for d in ("bf16", "fp16", "fp32") if d in per_dtype] + \
            sorted(d for d in per_dtype if d not in ("bf16", "fp16", "fp32"))
        dtypes = dtypes or list(default_dtypes)
        seq_axes = []
        for c in range(width):
            if c >= len(dtypes):
                axes[r, c].axis("off")
                axes[r, width + c].axis("off")
                continue
            data = per_dtype.get(dtypes[c])
            draw_token_scatter(axes[r, c], data, dtypes[c])
            draw_seq_mismatch(axes[r, width + c], data, dtypes[c])
            if data is not None and len(data.lengths):
                seq_axes.append(axes[r, width + c])
        if model:
            axes[r, 0].set_title(f"{model}: {axes[r, 0].get_title()}")
        if seq_axes:
            low = min(a.get_ylim()[0] for a in seq_axes)
            high = max(a.get_ylim()[1] for a in seq_axes)
            for ax in seq_axes:
                ax.set_ylim(low, high)
    notes = ("Offline mismatch between the inference engine (μ, vLLM) and the training engine (π) in the same dtype. "
             "Scatter: subsample of sampled tokens. KL[μ|π] = mean over sequences of Σ_t (log μ − log π); "
             "slope of the least-squares line in nats per 1K tokens.")
    add_caption(fig, "Offline training–inference mismatch", scale, notes)
    return fig
