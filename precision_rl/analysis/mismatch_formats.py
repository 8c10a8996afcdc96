"""The mismatch ladder's real rungs offline (``make mismatch-formats``, ``precision_rl.mismatch.formats``): one row
per rung, read from the result's summaries, written to ``results/mismatch_formats.{csv,md}`` and to a block of
results/README.md."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl.analysis.ladder import rung_order
from precision_rl.analysis.mismatch_results import find_pairs, read_columns, read_summary
from precision_rl.analysis.plotting import PRECISION_NAMES
from precision_rl.analysis.readme_blocks import ReadmeBlock
from precision_rl.analysis.tables import write_csv_and_markdown
from precision_rl.console import render_table
from precision_rl.errors import UserError
from precision_rl.mismatch.formats import rung_pairs, rung_specs
from precision_rl.mismatch.layout import FORMATS_RESULT, SEQUENCES, SEQUENCES_CSV, TOKENS, TOKENS_CSV

FORMATS_CSV, FORMATS_MD = "mismatch_formats.csv", "mismatch_formats.md"
QUANTITIES = ("n_sequences", "mean_length", "exact_seq_kl", "seq_kl", "seq_kl_k3", "token_k3_kl", "token_k3_kl_median",
              "token_k3_kl_p99", "mean_abs_prob_diff")  # summary.json keys (precision_rl.mismatch.metrics.summarize)
INTERVAL = ("exact_seq_kl_low", "exact_seq_kl_high")  # the bootstrap interval of exact_seq_kl (sequence_kl_interval)
BOOTSTRAP_RESAMPLES, BOOTSTRAP_LEVEL, BOOTSTRAP_SEED = 2000, 0.90, 0
HEADERS = ("trainer / rollout", "answers", "mean length (tokens)", "KL[μ‖π] per sequence: exact",
           f"its {BOOTSTRAP_LEVEL:.0%} interval", "k1", "k3", "token k3: mean", "median", "99th percentile",
           "mean \\|π − μ\\|")
README_BLOCK = ReadmeBlock(
    "<!-- ladder formats offline (tiny scale): written by `make published-results` from results/logs/mismatch -->",
    "<!-- end of ladder formats offline -->")


def formats_table(roots: Path | Sequence[Path]) -> pd.DataFrame:
    """Return one row per real rung of the ladder measured in the first of ``roots`` holding the ``ladder-formats``
    result, finest rollout format first: ``train``, ``infer``, the summary's ``QUANTITIES`` and ``run_id``; empty where
    no root holds it. ``attrs["sources"]`` lists the folders read."""
    roots = [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]
    root = next((r for r in roots if (r / FORMATS_RESULT).is_dir()), None)
    found = {(train, infer): pair_dir for model, train, infer, pair_dir in (find_pairs(root) if root else [])
             if model == FORMATS_RESULT}
    pairs = sorted((p for p in rung_pairs(rung_specs()) if p in found), key=lambda p: rung_order(p[1]))
    rows = []
    for train, infer in pairs:
        summary = read_summary(found[(train, infer)])
        low, high = sequence_kl_interval(found[(train, infer)])
        rows.append({"train": train, "infer": infer, **{q: summary.get(q) for q in QUANTITIES},
                     INTERVAL[0]: low, INTERVAL[1]: high, "run_id": summary.get("run_id")})
    table = pd.DataFrame(rows, columns=["train", "infer", *QUANTITIES, *INTERVAL, "run_id"])
    table.attrs["sources"] = sorted(str(found[p]) for p in pairs)
    return table


def sequence_kl_interval(pair_dir: Path) -> tuple[float | None, float | None]:
    """Return the central ``BOOTSTRAP_LEVEL`` interval of the exact per-sequence KL's mean over a pair's answers: the
    answers resampled with replacement ``BOOTSTRAP_RESAMPLES`` times (seeded, so the same files give the same
    interval). A few tokens carry much of a fine format's KL, so its mean moves with the sample set far more than its
    standard error suggests. (None, None) where the tokens carry no exact KL (a tool run without full-vocabulary
    log-probs) or cannot be read."""
    try:
        tokens = read_columns(pair_dir, TOKENS, TOKENS_CSV, ["seq_id", "exact_kl"])
        seq_ids = read_columns(pair_dir, SEQUENCES, SEQUENCES_CSV, ["seq_id"])["seq_id"]
    except UserError:
        return None, None
    if not len(seq_ids) or not np.isfinite(tokens["exact_kl"]).all():
        return None, None
    per_answer = pd.Series(tokens["exact_kl"]).groupby(tokens["seq_id"]).sum().reindex(seq_ids, fill_value=0.0)
    values = per_answer.to_numpy()
    draws = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(values), (BOOTSTRAP_RESAMPLES, len(values)))
    tail = (1 - BOOTSTRAP_LEVEL) / 2
    low, high = np.quantile(values[draws].mean(axis=1), [tail, 1 - tail])
    return float(low), float(high)


def _cell(value, spec: str = ".2g") -> str:
    """Return a value formatted by ``spec`` (two significant digits), or a dash where there is no finite number (a
    summary without the key, or a hand-edited one)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    return format(number, spec) if np.isfinite(number) else "—"


def formats_markdown_table(table: pd.DataFrame) -> str:
    """Return the rungs as a Markdown table (``HEADERS``), or a line saying no result is published."""
    if table.empty:
        return f"No `{FORMATS_RESULT}` result is published (`make mismatch-formats`, then `make publish-mismatch " \
               f"RESULT={FORMATS_RESULT}`)."
    rows = [[f"{PRECISION_NAMES.get(r.train, r.train)} / {PRECISION_NAMES.get(r.infer, r.infer)}",
             _cell(r.n_sequences, ".0f"), _cell(r.mean_length, ".1f"), _cell(r.exact_seq_kl),
             "—" if "—" in (low := _cell(r.exact_seq_kl_low), high := _cell(r.exact_seq_kl_high)) else f"{low}–{high}",
             *(_cell(getattr(r, q)) for q in QUANTITIES[3:])] for r in table.itertuples(index=False)]
    return render_table(rows, HEADERS, markdown=True, floatfmt="")


def formats_markdown(table: pd.DataFrame) -> str:
    """Return the rungs' offline measurement as a Markdown document."""
    return "\n".join([
        "# The mismatch ladder's real rungs, offline — tiny scale (CPU)", "",
        "What each real rung's rollout format costs in mismatch before any training: the shipped model sampled by the "
        "vLLM engine with its linear layers quantized as a ladder run's are (μ), recomputed by the training engine in "
        "the rung's training dtype (π), on the rungs' training prompts (`make mismatch-formats`). KL[μ‖π] per "
        "sequence: exact from the full vocabulary, with the central "
        f"{BOOTSTRAP_LEVEL:.0%} interval of its mean over {BOOTSTRAP_RESAMPLES:,} resamplings of the answers, and by k1 "
        "and k3 from the sampled tokens; per token: k3.", "",
        formats_markdown_table(table), ""])


def write_formats(table: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``mismatch_formats.csv`` and ``mismatch_formats.md`` into ``out_dir`` atomically; return both paths."""
    return write_csv_and_markdown(table, formats_markdown(table), Path(out_dir) / FORMATS_CSV,
                                  Path(out_dir) / FORMATS_MD)
