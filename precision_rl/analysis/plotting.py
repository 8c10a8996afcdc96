"""The one plotting module: style, colours, curve drawing (faint raw + bold EMA, seed bands), panel notes (across a
panel that draws nothing, in the freest corner of one that draws, under the legend of a figure), captions that name
the scale, atomic PNG + PDF saving, and the drawing of Fig. 5 (offline mismatch).

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
from precision_rl.config.scale import PAPER, TINY
from precision_rl.fileio import atomic_path  # noqa: E402

SCALE_LABELS = {PAPER: "paper scale (GPU)", TINY: "tiny scale (CPU)"}
PRECISION_COLORS = {"bf16": "#1f77b4", "fp16": "#2ca02c", "fp32": "#ff7f0e"}
PRECISION_NAMES = {"bf16": "BF16", "fp16": "FP16", "fp32": "FP32", "fp8_e4m3": "FP8 E4M3", "fp8_e5m2": "FP8 E5M2",
                   "fp4_e2m1": "MXFP4"}
# In the precision ablation the colour is the training dtype and the line style the inference dtype.
INFER_LINESTYLES = {"bf16": "-", "fp16": "--", "fp32": ":"}
_TAB10 = plt.get_cmap("tab10").colors
ALGORITHM_LABELS = {"grpo": "GRPO", "grpo_token_tis": "GRPO-Token-TIS", "grpo_seq_mis": "GRPO-Seq-MIS",
                    "gspo": "GSPO", "pg_seq_is": "PG-Seq-IS", "pg_seq_tis": "PG-Seq-TIS", "pg_seq_mis": "PG-Seq-MIS",
                    "dapo": "DAPO"}
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
CAPTION_LINES, CAPTION_LINE = 3, 0.13  # caption lines the bottom margin holds; inches per further line at 7 pt
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


EMPTY_GID = "empty-panel"  # the artist id of the text across a panel that draws nothing
NOTE_GID = "panel-note"  # the artist id of a drawn panel's corner note
EMPTY_FONTSIZE, NOTE_FONTSIZE = 8.0, 6.5


def seeds_label(n: int) -> str:
    """Return how a panel counts an arm's seeds: "1 seed", "3 seeds"."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


def wrap_lines(lines: list[str], width: int) -> str:
    """Return ``lines`` wrapped to ``width`` characters each (never inside a word or at a hyphen), one text."""
    out = []
    for line in lines:
        out += textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""]
    return "\n".join(out)


def text_width(ax: plt.Axes, fontsize: float, share: float = 0.9) -> int:
    """Return how many characters at ``fontsize`` fit on ``share`` of the panel's width."""
    inches = ax.get_position().width * ax.figure.get_figwidth() * share
    return max(16, int(inches * 72 / (0.55 * fontsize)))


def mark_empty(ax: plt.Axes, text: str | list[str] = NO_RUNS) -> None:
    """Write ``text`` (default "no runs"; a list: one paragraph each) across a panel that draws nothing and hide its
    ticks."""
    lines = [text] if isinstance(text, str) else list(text)
    ax.text(0.5, 0.5, wrap_lines(lines, text_width(ax, EMPTY_FONTSIZE, 0.92)), transform=ax.transAxes, ha="center",
            va="center", fontsize=EMPTY_FONTSIZE, color="0.35", gid=EMPTY_GID, linespacing=1.3)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_yticks([], minor=True)
    ax.grid(False)


# Where a drawn panel's note may go, in axes fractions: (x, y, ha, va), lower right first.
NOTE_CORNERS = ((0.98, 0.03, "right", "bottom"), (0.98, 0.97, "right", "top"), (0.02, 0.03, "left", "bottom"),
                (0.02, 0.97, "left", "top"))


def _densify(xy: np.ndarray, per_segment: int = 8) -> np.ndarray:
    """Return ``xy`` with points added along each segment, so that a sparse line (evaluation points) counts where
    it runs, not only where its points are."""
    if len(xy) < 2 or len(xy) > 500:
        return xy
    t = np.linspace(0, len(xy) - 1, (len(xy) - 1) * per_segment + 1)
    return np.column_stack([np.interp(t, np.arange(len(xy)), xy[:, k]) for k in range(2)])


def _drawn_points(ax: plt.Axes) -> np.ndarray:
    """Return the vertices of the panel's lines and bands in axes fractions (n × 2)."""
    ax.autoscale_view()
    chunks = [_densify(np.asarray(line.get_xydata(), dtype=float)) for line in ax.get_lines()]
    chunks += [path.vertices for coll in ax.collections for path in coll.get_paths()]
    chunks = [c for c in chunks if c.size]
    if not chunks:
        return np.empty((0, 2))
    points = np.concatenate(chunks)
    points = points[np.isfinite(points).all(axis=1)]
    return (ax.transData + ax.transAxes.inverted()).transform(points) if len(points) else points


def emptiest_corner(ax: plt.Axes, size: tuple[float, float]) -> tuple[float, float, str, str]:
    """Return the corner of NOTE_CORNERS whose ``size`` (axes fractions) box covers the fewest drawn points."""
    points = _drawn_points(ax)
    w, h = size

    def covered(corner) -> int:
        x, y, ha, va = corner
        x0, y0 = (x - w if ha == "right" else x), (y - h if va == "top" else y)
        inside = (points[:, 0] >= x0) & (points[:, 0] <= x0 + w) & (points[:, 1] >= y0) & (points[:, 1] <= y0 + h)
        return int(inside.sum())

    return min(NOTE_CORNERS, key=covered)


def corner_note(ax: plt.Axes, lines: list[str]) -> None:
    """Write a drawn panel's note (seeds per arm, why other arms are missing), one paragraph per line, in the
    corner its curves leave freest."""
    if not lines:
        return
    width = text_width(ax, NOTE_FONTSIZE, 0.62)
    text = wrap_lines(lines, width)
    box = (min(0.62, max(len(t) for t in text.split("\n")) / width * 0.62),
           (text.count("\n") + 1) * NOTE_FONTSIZE * 1.4 / 72 / (ax.get_position().height * ax.figure.get_figheight()))
    x, y, ha, va = emptiest_corner(ax, box)
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, multialignment="left", fontsize=NOTE_FONTSIZE,
            color="0.25", gid=NOTE_GID, zorder=5,
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "0.8", "alpha": 0.85})


def panel_note(ax: plt.Axes) -> str | None:
    """Return the text across a panel marked empty (``mark_empty``), or None when the panel drew something."""
    for text in ax.texts:
        if text.get_gid() == EMPTY_GID:
            return text.get_text()
    return None


def panel_texts(ax: plt.Axes | plt.Figure) -> list[str]:
    """Return the notes of a panel (empty-panel text, corner note) or of a figure (header note) with their line wraps
    undone, for reading back."""
    return [" ".join(t.get_text().split()) for t in ax.texts if t.get_gid() in (EMPTY_GID, NOTE_GID)]


def draw_training_curve(ax: plt.Axes, curves: list[pd.Series], color, label: str, linestyle: str = "-") -> int:
    """Draw one arm's training curve: faint raw mean, bold EMA mean, min–max band over seeds' EMAs.

    ``curves`` holds one series per seed. Returns how many seeds it drew (0: no curve has data, nothing drawn).
    """
    curves = [c for c in curves if c is not None and not c.empty]
    if not curves:
        return 0
    band = aggregate([ema(c) for c in curves])
    raw_mean = aggregate(curves)
    ax.plot(raw_mean.steps, raw_mean.mean, color=color, alpha=RAW_ALPHA, linewidth=0.7, linestyle=linestyle)
    if band.n_seeds > 1:
        ax.fill_between(band.steps, band.low, band.high, color=color, alpha=BAND_ALPHA, linewidth=0)
        label = f"{label} (n={band.n_seeds})"
    ax.plot(band.steps, band.mean, color=color, linewidth=1.6, label=label, linestyle=linestyle)
    return band.n_seeds


def draw_eval_curve(ax: plt.Axes, curves: list[pd.Series], color, label: str, linestyle: str = "-") -> int:
    """Draw one arm's evaluation curve: unsmoothed points at each evaluation, mean and min–max band over seeds.

    Returns how many seeds it drew (0: no curve has data, nothing drawn).
    """
    band = aggregate(curves)
    if band is None:
        return 0
    if band.n_seeds > 1:
        ax.fill_between(band.steps, band.low, band.high, color=color, alpha=BAND_ALPHA, linewidth=0)
        label = f"{label} (n={band.n_seeds})"
    ax.plot(band.steps, band.mean, color=color, linewidth=1.2, marker="o", markersize=2.5, label=label,
            linestyle=linestyle)
    return band.n_seeds


def add_caption(fig: plt.Figure, title: str, scale: str, notes: str = "", scope: str = "") -> None:
    """Put the figure title (with the scale) on top and a caption naming the scale, the runs' ``scope`` (at tiny
    scale: profile and instrument) and the smoothing at the bottom."""
    width = fig.get_figwidth()
    fig.suptitle(f"{title} — {scale_label(scale)}" + (f", {scope.split(';')[0]}" if scope else ""), fontsize=11,
                 x=0.5, y=1 - 0.12 / fig.get_figheight(), va="top")
    caption = f"Scale: {scale_label(scale)}." + (f" Runs: {scope}." if scope else "") + (f" {notes}" if notes else "")
    lines = textwrap.wrap(caption, max(40, int(width * 17)))  # ~17 characters per inch at 7 pt
    if len(lines) > CAPTION_LINES:  # grow the bottom margin by the extra lines; the panels keep their size
        extra = CAPTION_LINE * (len(lines) - CAPTION_LINES)
        height, pars = fig.get_figheight(), fig.subplotpars
        top_in, bottom_in = (1 - pars.top) * height, pars.bottom * height
        fig.set_figheight(height + extra)
        fig.subplots_adjust(top=1 - top_in / (height + extra), bottom=(bottom_in + extra) / (height + extra))
        if fig._suptitle is not None:
            fig._suptitle.set_y(1 - 0.12 / (height + extra))
        for legend in fig.legends:
            legend.set_bbox_to_anchor((0.5, 1 - LEGEND_FROM_TOP / (height + extra)))
        for text in fig.texts:
            x, y = text.get_position()
            text.set_y(1 - (1 - y) * height / (height + extra))
    fig.text(0.08 / width, 0.06 / fig.get_figheight(), "\n".join(lines), ha="left", va="bottom", fontsize=7,
             color="0.3")


LEGEND_FROM_TOP = 0.38  # inches from the figure's top edge to the shared legend's top
HEADER_LINE = 0.14  # inches per line of a header note at NOTE_FONTSIZE + 0.5
ONE_ROW_LEGEND = 0.24  # inches from a one-row shared legend's top to the header note under it
LEGEND_NOTE_GAP = 0.04  # inches between a taller legend's bottom and the header note


def figure_legend(fig: plt.Figure, handles_labels: dict[str, tuple]) -> None:
    """Draw one legend for the whole figure from label → (color, linestyle), in as many columns as fit its width."""
    if not handles_labels:
        return
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, linestyle=ls, linewidth=1.8) for c, ls in handles_labels.values()]
    entry = max(len(label) for label in handles_labels) * 0.56 * 7 / 72 + 0.6  # inches: text at 7 pt + handle
    ncol = max(1, min(len(handles), 6, int(fig.get_figwidth() / entry)))
    fig.legend(handles, list(handles_labels), loc="upper center", ncol=ncol, frameon=False,
               bbox_to_anchor=(0.5, 1 - LEGEND_FROM_TOP / fig.get_figheight()))


def header_note(fig: plt.Figure, lines: list[str]) -> None:
    """Write ``lines`` centred under the figure's legend (what no panel draws, and why), growing the top margin to
    make room; the panels keep their size."""
    if not lines:
        return
    size = NOTE_FONTSIZE + 0.5
    text = wrap_lines(lines, int(fig.get_figwidth() * 0.8 * 72 / (0.56 * size)))
    renderer = fig.canvas.get_renderer()
    legend_bottom = max(((fig.bbox.height - legend.get_window_extent(renderer).y0) / fig.dpi
                         for legend in fig.legends), default=0.0)  # inches from the figure's top edge
    below_legend = max(ONE_ROW_LEGEND, legend_bottom - LEGEND_FROM_TOP + LEGEND_NOTE_GAP)  # legend top to note top
    extra = HEADER_LINE * (text.count("\n") + 1) + 0.05 + (below_legend - ONE_ROW_LEGEND)
    height, pars = fig.get_figheight(), fig.subplotpars
    top_in, bottom_in = (1 - pars.top) * height, pars.bottom * height
    fig.set_figheight(height + extra)
    fig.subplots_adjust(top=1 - (top_in + extra) / (height + extra), bottom=bottom_in / (height + extra))
    for legend in fig.legends:
        legend.set_bbox_to_anchor((0.5, 1 - LEGEND_FROM_TOP / (height + extra)))
    fig.text(0.5, 1 - (LEGEND_FROM_TOP + below_legend) / (height + extra), text, ha="center", va="top",
             fontsize=size, color="0.25", gid=NOTE_GID)


# No creation date, so that a redrawn figure is byte-identical to the committed one when its data is.
REPRODUCIBLE_METADATA = {"png": {}, "pdf": {"CreationDate": None}}


def save_figure(fig: plt.Figure, png_path: Path) -> tuple[Path, Path]:
    """Save ``fig`` as PNG at ``png_path`` and as PDF beside it, each atomically; close it; return both paths."""
    png_path = Path(png_path)
    if png_path.suffix.lower() != ".png":
        raise ValueError(f"figure path must end in .png: {png_path}")
    pdf_path = png_path.with_suffix(".pdf")
    for path, fmt in ((png_path, "png"), (pdf_path, "pdf")):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, metadata=REPRODUCIBLE_METADATA[fmt])
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
    box = f"Slope = {data.slope_per_1k:.3g}, KL[μ|π] = {data.seq_kl:.3g}\n{len(data.lengths)} sequences"
    ax.text(0.03, 0.05, box, transform=ax.transAxes, fontsize=8,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "0.6"})
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
