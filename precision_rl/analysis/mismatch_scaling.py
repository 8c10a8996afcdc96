"""How the training-inference mismatch grows with response length and with model width (issue 14's effect study),
from offline mismatch results.

Length: a forced-length result (the mismatch tool with ``--ignore-eos``) holds sequences that all run to
``max_tokens``, each
token with its exact full-vocabulary KL(μ‖π). The KL of a sequence's first L tokens is the sum of its per-position
KLs, so one result gives the sequence-level mismatch at every length L ≤ max_tokens, the quantity whose growth the
paper's Fig. 5 fits with a line (there from sequences of natural length, k1 estimate Σ_t log μ − log π).

Natural length: the result of ``precision_rl.mismatch.long_answers`` (``tiny-long``: a model trained on answers of
~20-250 tokens, each response ending where the model ends it): per response, its exact KL summed over its tokens,
against its length; the least-squares slope is the exact counterpart of Fig. 5's.

Width: the results of ``precision_rl.mismatch.width`` (``tiny-w<width>``: models that differ only in width, sampled
to their natural length), one row per width with each dtype's exact token KL and mean |π−μ|.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl.analysis.mismatch_results import (
    column_names,
    find_pairs,
    forced_length,
    read_columns,
    read_summary,
    result_scale,
)
from precision_rl.analysis.tables import write_csv_and_markdown
from precision_rl.console import render_table
from precision_rl.errors import UserError
from precision_rl.mismatch.layout import EXACT_KL, TOKENS, TOKENS_CSV
from precision_rl.mismatch.long_answers import RESULT_NAME as LONG_RESULT
from precision_rl.mismatch.width import RESULT_PREFIX, STUDY_SCALE

PREFIX_LENGTHS = (16, 32, 64, 128, 256, 512, 1024)  # lengths the table reports (those within the result)


@dataclass(frozen=True)
class LengthProfile:
    """One dtype's mismatch along the response: per position (0-based) and per prefix length (1..max)."""

    model: str
    dtype: str
    n_sequences: int
    token_kl: np.ndarray  # mean over sequences of the exact KL(μ‖π) at each position
    prefix_kl: np.ndarray  # mean over sequences of the exact KL of the first L tokens, L = 1..max
    prefix_k1: np.ndarray  # the same from sampled tokens only: mean of Σ_{t<L} (log μ − log π)

    def per_token_rate(self, start: int, stop: int) -> float:
        """Return the mean exact token KL over positions ``[start, stop)``: the slope of ``prefix_kl`` there."""
        return float(self.token_kl[start:stop].mean())


def length_profile(pair_dir: Path, model: str, dtype: str) -> LengthProfile:
    """Return the length profile of one forced-length result folder; raise UserError if it lacks exact KL or its
    sequences differ in length."""
    cols = read_columns(Path(pair_dir), TOKENS, TOKENS_CSV, ["seq_id", "position", "logp_infer", "logp_train"])
    try:
        exact = read_columns(Path(pair_dir), TOKENS, TOKENS_CSV, [EXACT_KL])[EXACT_KL]
    except UserError:
        raise UserError(f"{pair_dir}: no exact_kl column; run the mismatch tool with --exact-kl on") from None
    frame = pd.DataFrame({**cols, "exact_kl": exact, "k1": cols["logp_infer"] - cols["logp_train"]})
    lengths = frame.groupby("seq_id").size()
    if lengths.nunique() != 1:
        raise UserError(f"{pair_dir}: sequences of {lengths.min()}-{lengths.max()} tokens; a length profile needs a "
                        "forced-length result (--ignore-eos)")
    wide = {name: frame.pivot(index="seq_id", columns="position", values=name).to_numpy() for name in ("exact_kl", "k1")}
    return LengthProfile(model=model, dtype=dtype, n_sequences=int(len(lengths)),
                         token_kl=wide["exact_kl"].mean(axis=0),
                         prefix_kl=np.cumsum(wide["exact_kl"], axis=1).mean(axis=0),
                         prefix_k1=np.cumsum(wide["k1"], axis=1).mean(axis=0))


def _roots(roots: Path | Sequence[Path]) -> list[Path]:
    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    return list(dict.fromkeys(Path(r).resolve() for r in roots))


def _forced_dirs(roots: Path | Sequence[Path], scale: str) -> dict[str, dict[str, Path]]:
    out: dict[str, dict[str, Path]] = {}
    for root in _roots(roots):
        for model, train, infer, pair_dir in find_pairs(root):
            summary = read_summary(pair_dir)
            if train == infer and forced_length(summary) and result_scale(model, summary) == scale:
                out.setdefault(model, {}).setdefault(train, pair_dir)
    return out


def profile_dirs(roots: Path | Sequence[Path], scale: str, model: str) -> dict[str, Path]:
    """Return dtype → the forced-length result folder of ``model`` at ``scale`` that ``load_profiles`` reads."""
    return _forced_dirs(roots, scale).get(model, {})


def load_profiles(roots: Path | Sequence[Path], scale: str) -> dict[str, dict[str, LengthProfile]]:
    """Return model → dtype → profile for the forced-length self-pair results at ``scale`` (first root wins)."""
    return {model: {dtype: length_profile(pair_dir, model, dtype) for dtype, pair_dir in dirs.items()}
            for model, dirs in _forced_dirs(roots, scale).items()}


def length_table(profiles: dict[str, LengthProfile]) -> pd.DataFrame:
    """Return one row per reported prefix length: each dtype's sequence-level exact KL and their ratio (columns
    ``length``, ``<dtype>_seq_kl``..., ``bf16_over_fp16`` when both are present)."""
    longest = min(len(p.prefix_kl) for p in profiles.values())
    lengths = [n for n in PREFIX_LENGTHS if n <= longest] + ([longest] if longest not in PREFIX_LENGTHS else [])
    table = pd.DataFrame({"length": lengths})
    for dtype, profile in sorted(profiles.items()):
        table[f"{dtype}_seq_kl"] = [float(profile.prefix_kl[n - 1]) for n in lengths]
    if {"bf16", "fp16"} <= set(profiles):
        table["bf16_over_fp16"] = table["bf16_seq_kl"] / table["fp16_seq_kl"]
    return table


def growth(profile: LengthProfile) -> dict[str, float]:
    """Return how the per-token mismatch changes along the response: the mean token KL over the first and the last
    quarter of positions, their ratio, and the least-squares slope of prefix KL against length (nats per token)."""
    n = len(profile.token_kl)
    quarter = max(1, n // 4)
    first, last = profile.per_token_rate(0, quarter), profile.per_token_rate(n - quarter, n)
    slope = float(np.polyfit(np.arange(1, n + 1), profile.prefix_kl, 1)[0])
    return {"first_quarter_token_kl": first, "last_quarter_token_kl": last, "last_over_first": last / first,
            "slope_per_token": slope}


def natural_length(roots: Path | Sequence[Path], forced_summary: dict) -> float | None:
    """Return the mean response length of the natural-length result of the same model (matched by the model
    folder's name) and inference dtype as ``forced_summary``, or None when there is none."""
    model = Path(str(forced_summary.get("model", ""))).name
    for root in _roots(roots):
        for _, _, infer, pair_dir in find_pairs(root):
            summary = read_summary(pair_dir)
            if (not forced_length(summary) and infer == forced_summary.get("infer_dtype")
                    and Path(str(summary.get("model", ""))).name == model and summary.get("mean_length")):
                return float(summary["mean_length"])
    return None


@dataclass(frozen=True)
class NaturalLengths:
    """One dtype's responses of natural length: each one's length and exact sequence KL(μ‖π)."""

    model: str
    dtype: str
    lengths: np.ndarray
    seq_kl: np.ndarray

    @property
    def slope_per_1k(self) -> float:
        """Return the least-squares slope of sequence KL against length, in nats per 1K tokens."""
        return float(np.polyfit(self.lengths, self.seq_kl, 1)[0] * 1000)

    def token_kl(self, shortest: int = 0, longest: int | None = None) -> float:
        """Return the KL per token (total KL over total tokens) of the responses with ``shortest`` ≤ length <
        ``longest``; NaN when there are none."""
        keep = (self.lengths >= shortest) & (self.lengths < (np.inf if longest is None else longest))
        return float(self.seq_kl[keep].sum() / self.lengths[keep].sum()) if keep.any() else np.nan


def natural_lengths(pair_dir: Path, model: str, dtype: str) -> NaturalLengths:
    """Return the responses of one natural-length result folder; raise UserError if it lacks exact KL."""
    cols = read_columns(Path(pair_dir), TOKENS, TOKENS_CSV, ["seq_id"])
    try:
        exact = read_columns(Path(pair_dir), TOKENS, TOKENS_CSV, [EXACT_KL])[EXACT_KL]
    except UserError:
        raise UserError(f"{pair_dir}: no exact_kl column; run the mismatch tool with --exact-kl on") from None
    per_seq = pd.DataFrame({"seq_id": cols["seq_id"], "exact_kl": exact}).groupby("seq_id")["exact_kl"]
    return NaturalLengths(model=model, dtype=dtype, lengths=per_seq.size().to_numpy().astype(float),
                          seq_kl=per_seq.sum().to_numpy())


def natural_dirs(roots: Path | Sequence[Path], scale: str, model: str = LONG_RESULT) -> dict[str, Path]:
    """Return dtype → the natural-length self-pair result folder of ``model`` at ``scale`` (first root wins)."""
    out: dict[str, Path] = {}
    for root in _roots(roots):
        for found, train, infer, pair_dir in find_pairs(root):
            summary = read_summary(pair_dir)
            if (found == model and train == infer and not forced_length(summary)
                    and result_scale(found, summary) == scale):
                out.setdefault(train, pair_dir)
    return out


def load_natural(roots: Path | Sequence[Path], scale: str, model: str = LONG_RESULT) -> dict[str, NaturalLengths]:
    """Return dtype → the responses of ``model``'s natural-length results at ``scale`` (the long-answer study's)."""
    return {dtype: natural_lengths(pair_dir, model, dtype)
            for dtype, pair_dir in natural_dirs(roots, scale, model).items()}


WIDTH_QUANTITIES = ("exact_kl", "mean_abs_prob_diff", "exact_seq_kl", "mean_length")
SPREAD_QUANTITIES = ("median_token_kl", "p90_token_kl", "max_token_kl", "tail_kl_share")
TAIL_FRACTION = 0.01  # the largest 1 % of tokens, whose share of the mean token KL the width table reports


def token_kl_spread(pair_dir: Path) -> dict[str, float]:
    """Return how one result's exact token KL is spread over its tokens: ``median_token_kl``, ``p90_token_kl``,
    ``max_token_kl`` and ``tail_kl_share`` (the share of the summed KL carried by the largest ``TAIL_FRACTION`` of
    tokens, at least one); NaN for each when the result has no exact KL (μ not sampled over the full vocabulary)."""
    if EXACT_KL not in column_names(Path(pair_dir), TOKENS, TOKENS_CSV):
        return dict.fromkeys(SPREAD_QUANTITIES, np.nan)
    kl = np.sort(read_columns(Path(pair_dir), TOKENS, TOKENS_CSV, [EXACT_KL])[EXACT_KL])
    if not len(kl):
        return dict.fromkeys(SPREAD_QUANTITIES, np.nan)
    top = max(1, int(len(kl) * TAIL_FRACTION))
    total = float(kl.sum())
    share = float(kl[-top:].sum() / total) if total > 0 else np.nan
    return dict(zip(SPREAD_QUANTITIES, (float(np.median(kl)), float(np.quantile(kl, 0.9)), float(kl[-1]), share),
                    strict=True))


def width_of(model: str) -> int | None:
    """Return the hidden size a width-study result folder name carries (``tiny-w512`` → 512), else None."""
    digits = model[len(RESULT_PREFIX):] if model.startswith(RESULT_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def width_table(roots: Path | Sequence[Path], scale: str = STUDY_SCALE) -> pd.DataFrame:
    """Return one row per width-study model (sorted by ``width``): for bf16 and fp16, the summary's exact token KL,
    mean |π−μ|, exact sequence KL, mean response length and token count, and how the token KL is spread
    (``token_kl_spread``), each as ``<dtype>_<quantity>``, and the bf16/fp16 ratio of the token KL
    (``exact_kl_ratio``); empty when there are no width results. ``attrs["sources"]`` lists the result folders
    read."""
    rows: dict[int, dict] = {}
    sources: dict[tuple[int, str], Path] = {}
    for root in _roots(roots):
        for model, train, infer, pair_dir in find_pairs(root):
            width, summary = width_of(model), read_summary(pair_dir)
            if width is None or train != infer or forced_length(summary) or result_scale(model, summary) != scale:
                continue
            if (width, train) in sources:
                continue
            sources[(width, train)] = pair_dir
            row = rows.setdefault(width, {"width": width})
            for name in WIDTH_QUANTITIES:
                row[f"{train}_{name}"] = summary.get(name)
            row[f"{train}_n_tokens"] = summary.get("n_tokens")
            row.update({f"{train}_{name}": value for name, value in token_kl_spread(pair_dir).items()})
    table = pd.DataFrame(sorted(rows.values(), key=lambda r: r["width"]))
    table.attrs["sources"] = sorted(str(d) for d in sources.values())
    if {"bf16_exact_kl", "fp16_exact_kl"} <= set(table.columns):
        table["exact_kl_ratio"] = table["bf16_exact_kl"] / table["fp16_exact_kl"]
    return table


WIDTH_CSV, WIDTH_MD = "mismatch_width.csv", "mismatch_width.md"
WIDTH_HEADERS = ("width", "dtype", "tokens", "mean token KL", "median", "90th pct", "max",
                 f"share of the top {TAIL_FRACTION:.0%}", "mean |π−μ|", "response KL", "mean length")
WIDTH_ROW = ("n_tokens", "exact_kl", "median_token_kl", "p90_token_kl", "max_token_kl", "tail_kl_share",
             "mean_abs_prob_diff", "exact_seq_kl", "mean_length")


def _cell(value) -> str:
    """Return one width-table value in three significant digits, or a dash where there is none."""
    return "—" if value is None or not np.isfinite(value) else f"{value:.3g}"


def width_markdown(widths: pd.DataFrame, scale: str = STUDY_SCALE) -> str:
    """Return the width study as a Markdown document: one row per width and dtype (the exact KL(μ‖π) per token: its
    mean, median, 90th percentile, maximum and the share of the mean its largest tokens carry; the mean |π−μ|, the
    exact KL per response, the mean response length) and the BF16/FP16 ratio of the mean token KL per width."""
    rows = []
    for row in widths.itertuples(index=False):
        values = row._asdict()
        for dtype in ("bf16", "fp16"):
            if f"{dtype}_exact_kl" not in values or pd.isna(values[f"{dtype}_exact_kl"]):
                continue
            cells = [values[f"{dtype}_{name}"] for name in WIDTH_ROW]
            rows.append([str(row.width), dtype.upper(), f"{cells[0]:.0f}", *map(_cell, cells[1:5]),
                         f"{cells[5]:.0%}" if np.isfinite(cells[5]) else "—", *map(_cell, cells[6:])])
    ratios = ", ".join(f"{row.width}: {row.exact_kl_ratio:.0f}x" for row in widths.itertuples(index=False)
                       if "exact_kl_ratio" in widths.columns and np.isfinite(row.exact_kl_ratio))
    table = render_table(rows, WIDTH_HEADERS, markdown=True, floatfmt="") if rows else "No width results."
    return "\n".join([
        f"# Mismatch against model width — {scale} scale", "",
        "Offline mismatch of models that differ only in width (`make mismatch-width`), each sampled to its natural "
        "length with the same dtype on both sides. Per token: the exact KL(μ‖π) over the full vocabulary between the "
        "vLLM engine (μ) and the training engine (π); per response: its sum over the response's tokens.", "",
        table, "", f"BF16/FP16 ratio of the mean token KL: {ratios or '—'}.", ""])


def write_width(widths: pd.DataFrame, out_dir: Path, scale: str = STUDY_SCALE) -> tuple[Path, Path]:
    """Write ``mismatch_width.csv`` and ``mismatch_width.md`` into ``out_dir`` atomically; return both paths."""
    return write_csv_and_markdown(widths, width_markdown(widths, scale), Path(out_dir) / WIDTH_CSV,
                                  Path(out_dir) / WIDTH_MD)


def _rolling(values: np.ndarray, window: int) -> np.ndarray:
    return pd.Series(values).rolling(window, min_periods=1, center=True).mean().to_numpy()


def _draw_width(ax, widths: pd.DataFrame) -> None:
    from precision_rl.analysis import plotting as P

    ax.set_title("Token KL[μ‖π] against model width")
    ax.set_xlabel("hidden size (4 layers)")
    drew = False
    for dtype in ("bf16", "fp16"):
        column = f"{dtype}_exact_kl"
        if column in widths.columns and widths[column].notna().any():
            ax.plot(widths["width"], widths[column], "o-", color=P.PRECISION_COLORS[dtype],
                    label=P.PRECISION_NAMES[dtype])
            drew = True
    if not drew:
        P.mark_empty(ax)
        return
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(widths["width"], [str(w) for w in widths["width"]])
    ax.legend(fontsize=7)


def _draw_natural(ax, natural: dict[str, NaturalLengths]) -> None:
    from precision_rl.analysis import plotting as P

    ax.set_title("Seq KL[μ‖π] at natural length")
    ax.set_xlabel("response length (tokens, long-answer model)")
    if not natural:
        P.mark_empty(ax)
        return
    for dtype, responses in sorted(natural.items()):
        color = P.PRECISION_COLORS[dtype]
        ax.scatter(responses.lengths, responses.seq_kl, s=6, alpha=0.45, color=color, linewidths=0)
        slope, intercept = np.polyfit(responses.lengths, responses.seq_kl, 1)
        xs = np.array([responses.lengths.min(), responses.lengths.max()])
        ax.plot(xs, intercept + slope * xs, color=color,
                label=f"{P.PRECISION_NAMES[dtype]}: slope {slope * 1000:.2g}/1K (n={len(responses.lengths)})")
    ax.legend(fontsize=7)


def draw_mismatch_scaling(profiles: dict[str, LengthProfile], widths: pd.DataFrame, scale: str,
                          natural_length: float | None = None, natural: dict[str, NaturalLengths] | None = None):
    """Return the effect-study figure: (a) exact token KL(μ‖π) against model width, (b) the exact KL of a response's
    first L tokens against L, (c) the token KL by position (rolling mean over 8), both log y, with a dotted line where
    the model's own responses end on average (``natural_length``), (d) each response's exact KL against its natural
    length for the long-answer model (``natural``), with least-squares lines; BF16 blue, FP16 green."""
    from precision_rl.analysis import plotting as P

    fig, axes = P.new_figure(1, 4, panel_size=(3.9, 2.8))
    ax_width, ax_seq, ax_tok, ax_natural = axes.flat
    _draw_width(ax_width, widths)
    _draw_natural(ax_natural, natural or {})
    ax_seq.set_title("Seq KL[μ‖π] of the first L tokens")
    ax_tok.set_title("Token KL[μ‖π] by position")
    ax_seq.set_xlabel("L (response tokens, forced past EOS)")
    ax_tok.set_xlabel("position in the response")
    for dtype, profile in sorted(profiles.items()):
        color, name = P.PRECISION_COLORS[dtype], P.PRECISION_NAMES[dtype]
        lengths = np.arange(1, len(profile.prefix_kl) + 1)
        ax_seq.plot(lengths, profile.prefix_kl, color=color, label=f"{name} (n={profile.n_sequences} responses)")
        ax_tok.plot(lengths - 1, _rolling(profile.token_kl, 8), color=color, label=name)
    for ax in (ax_seq, ax_tok):
        if not profiles:
            P.mark_empty(ax)
            continue
        ax.set_yscale("log")
        if natural_length:
            ax.axvline(natural_length, color="0.4", linestyle=":", linewidth=1,
                       label=f"mean natural length ({natural_length:.0f})")
        ax.legend(fontsize=7)
    P.add_caption(fig, "Mismatch against model width and response length", scale,
                  "exact full-vocabulary KL from the offline mismatch tool (vLLM μ vs HF π, same dtype); (a) models "
                  "that differ only in width; (b, c) the tiny model forced past the end of its answers; (d) a model "
                  "trained on long answers, each response ending where the model ends it")
    return fig
