"""Read the offline mismatch tool's outputs for Fig. 5.

Layout (``precision_rl.mismatch.layout``): ``<root>/<model slug>/<train>-<infer>/`` holding the tokens table
(seq_id, position, token_id, logp_infer = log μ, logp_train = log π), the sequences table (seq_id, prompt_id, length,
log_ratio = Σ_t (log π − log μ)), as parquet (the tool's output) or CSV (a published copy), and ``summary.json``
(train_dtype, infer_dtype, seq_kl, slope_per_1k, ...). The scale is ``summary.json``'s ``scale`` when present;
otherwise a model slug that starts with ``tiny`` is the tiny scale and any other the paper scale.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from precision_rl.analysis.plotting import OfflineMismatch
from precision_rl.config.precision import PRECISIONS, ROLLOUT_FORMATS
from precision_rl.config.scale import PAPER, TINY
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_dir
from precision_rl.mismatch.layout import FORMATS_RESULT, MANIFEST, SEQUENCES, SEQUENCES_CSV, SUMMARY, TOKENS, TOKENS_CSV

CSV_FLOAT = "%.10g"  # published tables: ten significant digits, far below the smallest mismatch they carry (~1e-7)
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
        if train not in PRECISIONS or infer not in ROLLOUT_FORMATS:
            raise UserError(f"{pair_dir}: mismatch result folders are named <train>-<infer>, the training dtype one "
                            f"of {', '.join(PRECISIONS)} and the rollout's one of {', '.join(ROLLOUT_FORMATS)}")
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
    return TINY if model.lower().startswith("tiny") else PAPER


def forced_length(summary: dict) -> bool:
    """Return whether a mismatch result was sampled with ``--ignore-eos`` (every response runs to max_tokens): the
    length study's input, not Fig. 5's, whose responses stop where the model ends them."""
    return bool(summary.get("sampling", {}).get("ignore_eos", False))


def _fig5_result(model: str, train: str, infer: str, summary: dict, scale: str) -> bool:
    return (train == infer and model != FORMATS_RESULT and not forced_length(summary)
            and result_scale(model, summary) == scale)


def _table_path(pair_dir: Path, parquet: str, csv: str) -> Path:
    return pair_dir / parquet if (pair_dir / parquet).is_file() else pair_dir / csv


def column_names(pair_dir: Path, parquet: str, csv: str) -> list[str]:
    """Return the column names of a result table (the parquet file, else its published CSV copy); [] if absent."""
    path = _table_path(Path(pair_dir), parquet, csv)
    if not path.is_file():
        return []
    return list(pd.read_csv(path, nrows=0).columns) if path.suffix == ".csv" else pq.read_schema(path).names


def read_columns(pair_dir: Path, parquet: str, csv: str, needed: list[str]) -> dict[str, np.ndarray]:
    """Return the named columns (as float arrays) of a result table: the parquet file, else its published CSV copy."""
    path = _table_path(pair_dir, parquet, csv)
    if not path.is_file():
        raise UserError(f"missing {pair_dir / parquet} (or its published copy {csv})")
    try:
        if path.suffix == ".csv":
            frame = pd.read_csv(path, usecols=needed)
            return {name: frame[name].to_numpy(dtype=float) for name in needed}
        table = pq.read_table(path, columns=needed)
    except Exception as exc:  # noqa: BLE001 - pyarrow and pandas raise several types for bad files and missing columns
        raise UserError(f"{path}: cannot read columns {', '.join(needed)} ({str(exc).splitlines()[0]})") from None
    return {name: table.column(name).to_numpy(zero_copy_only=False).astype(float) for name in needed}


def read_pair(pair_dir: Path, model: str, dtype: str, points: int = SCATTER_POINTS, seed: int = 0) -> OfflineMismatch:
    """Return what Fig. 5 draws for one result folder (token subsample, sequences, slope and KL)."""
    pair_dir = Path(pair_dir)
    summary = read_summary(pair_dir)
    tokens = read_columns(pair_dir, TOKENS, TOKENS_CSV, ["logp_infer", "logp_train"])
    seqs = read_columns(pair_dir, SEQUENCES, SEQUENCES_CSV, ["length", "log_ratio"])
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


def load_offline(roots: Path | Sequence[Path], scale: str) -> dict[str, dict[str, OfflineMismatch]]:
    """Return model → dtype → data for the self-pair (train == infer) results at ``scale`` under ``roots``, forced-length
    results left out; where two roots hold the same model and pair, the first root's result is drawn."""
    out: dict[str, dict[str, OfflineMismatch]] = {}
    for root in _unique_roots(roots):
        for model, train, infer, pair_dir in find_pairs(root):
            if train in out.get(model, {}) or not _fig5_result(model, train, infer, read_summary(pair_dir), scale):
                continue
            out.setdefault(model, {})[train] = read_pair(pair_dir, model, train)
    return out


def _unique_roots(roots: Path | Sequence[Path]) -> list[Path]:
    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    return list(dict.fromkeys(Path(r).resolve() for r in roots))


def result_dirs(roots: Path | Sequence[Path], scale: str) -> list[Path]:
    """Return the result folders ``load_offline(roots, scale)`` draws from (a figure's sources)."""
    drawn: dict[tuple[str, str], Path] = {}
    for root in _unique_roots(roots):
        for model, train, infer, pair_dir in find_pairs(root):
            if _fig5_result(model, train, infer, read_summary(pair_dir), scale):
                drawn.setdefault((model, train), pair_dir)
    return sorted(drawn.values())


def published_pair(train: str, infer: str, summary: dict) -> bool:
    """Return whether a result folder is published: a self pair (train == infer: the pairs figures draw), or a pair
    the tool was asked for (``--pairs``: the ladder's real rungs), never a reference pair it added."""
    return train == infer or summary.get("is_reference_pair") is False


def publish_mismatch(src_root: Path, dest_root: Path, models: Sequence[str] = ()) -> list[Path]:
    """Copy the published pairs (``published_pair``) of the mismatch results under ``src_root``, only ``models``'
    when given, into ``dest_root`` with the same layout, their tables as CSV text; return the copies. A result
    published before is replaced."""
    found = [f for f in find_pairs(src_root)
             if (not models or f[0] in models) and published_pair(f[1], f[2], read_summary(f[3]))]
    if models and not found:
        raise UserError(f"no mismatch results of {', '.join(models)} under {src_root}")
    out = []
    for model, _, _, pair_dir in found:
        target = Path(dest_root) / model / pair_dir.name
        with atomic_dir(target) as tmp:
            pd.read_parquet(pair_dir / TOKENS).to_csv(tmp / TOKENS_CSV, index=False, float_format=CSV_FLOAT)
            pd.read_parquet(pair_dir / SEQUENCES).to_csv(tmp / SEQUENCES_CSV, index=False, float_format=CSV_FLOAT)
            for name in (SUMMARY, MANIFEST):
                if (pair_dir / name).is_file():
                    shutil.copy2(pair_dir / name, tmp / name)
        out.append(target)
    return out
