"""Read the offline mismatch tool's outputs for Fig. 5.

Layout (contract with the mismatch tool): ``runs/mismatch/<model slug>/<train>-<infer>/`` holding
``tokens.parquet`` (seq_id, position, token_id, logp_infer = log μ, logp_train = log π), ``sequences.parquet``
(seq_id, prompt_id, length, log_ratio = Σ_t (log π − log μ)) and ``summary.json`` (train_dtype, infer_dtype,
seq_kl, slope_per_1k, ...). The scale is ``summary.json``'s ``scale`` when present; otherwise a model slug that
starts with ``tiny`` is the tiny scale and any other the paper scale.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from precision_rl.analysis.plotting import OfflineMismatch
from precision_rl.config.precision import PRECISIONS
from precision_rl.errors import UserError

TOKENS, SEQUENCES, SUMMARY = "tokens.parquet", "sequences.parquet", "summary.json"
SCATTER_POINTS = 20_000  # tokens drawn per scatter (a fixed-seed subsample)


def find_pairs(root: Path) -> list[tuple[str, str, str, Path]]:
    """Return (model, train dtype, infer dtype, directory) of every mismatch result under ``root``, sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for summary in sorted(root.glob(f"*/*/{SUMMARY}")):
        pair_dir = summary.parent
        if pair_dir.name.startswith(".") or pair_dir.parent.name.startswith("."):
            continue  # a folder the mismatch tool is still writing (or left by a killed run)
        train, _, infer = pair_dir.name.partition("-")
        if train not in PRECISIONS or infer not in PRECISIONS:
            raise UserError(f"{pair_dir}: mismatch result folders are named <train>-<infer> with dtypes in "
                            f"{', '.join(PRECISIONS)}")
        found.append((pair_dir.parent.name, train, infer, pair_dir))
    return found


def read_summary(pair_dir: Path) -> dict:
    """Return a mismatch result's ``summary.json``."""
    path = Path(pair_dir) / SUMMARY
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"missing {path}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None


def result_scale(model: str, summary: dict) -> str:
    """Return the scale of a mismatch result (``summary["scale"]``, else ``tiny`` for tiny* model slugs)."""
    scale = summary.get("scale")
    if scale:
        return str(scale)
    return "tiny" if model.lower().startswith("tiny") else "paper"


def _columns(path: Path, needed: list[str]) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise UserError(f"missing {path}")
    try:
        table = pq.read_table(path, columns=needed)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for bad files and missing columns
        raise UserError(f"{path}: cannot read columns {', '.join(needed)} ({str(exc).splitlines()[0]})") from None
    return {name: table.column(name).to_numpy(zero_copy_only=False).astype(float) for name in needed}


def read_pair(pair_dir: Path, model: str, dtype: str, points: int = SCATTER_POINTS, seed: int = 0) -> OfflineMismatch:
    """Return what Fig. 5 draws for one result folder (token subsample, sequences, slope and KL)."""
    pair_dir = Path(pair_dir)
    summary = read_summary(pair_dir)
    tokens = _columns(pair_dir / TOKENS, ["logp_infer", "logp_train"])
    seqs = _columns(pair_dir / SEQUENCES, ["length", "log_ratio"])
    n = len(tokens["logp_infer"])
    pick = np.sort(np.random.default_rng(seed).choice(n, points, replace=False)) if n > points else slice(None)
    lengths, log_ratio = seqs["length"], seqs["log_ratio"]
    slope = summary.get("slope_per_1k")
    if slope is None:
        slope = float(np.polyfit(lengths / 1000.0, log_ratio, 1)[0]) if len(lengths) >= 2 and np.ptp(lengths) else 0.0
    seq_kl = summary.get("seq_kl")
    if seq_kl is None:
        seq_kl = float(-np.mean(log_ratio)) if len(log_ratio) else float("nan")
    return OfflineMismatch(model=model, dtype=dtype, mu=np.exp(tokens["logp_infer"][pick]),
                           pi=np.exp(tokens["logp_train"][pick]), lengths=lengths, log_ratio=log_ratio,
                           slope_per_1k=float(slope), seq_kl=float(seq_kl))


def load_offline(root: Path, scale: str) -> dict[str, dict[str, OfflineMismatch]]:
    """Return model → dtype → data for the self-pair (train == infer) results at ``scale`` under ``root``."""
    out: dict[str, dict[str, OfflineMismatch]] = {}
    for model, train, infer, pair_dir in find_pairs(root):
        if train != infer or result_scale(model, read_summary(pair_dir)) != scale:
            continue
        out.setdefault(model, {})[train] = read_pair(pair_dir, model, train)
    return out
