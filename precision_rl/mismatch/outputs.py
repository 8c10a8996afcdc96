"""Result directories ``runs/mismatch/<model>/<train>-<infer>/``: tables, summary and manifest, written atomically.

An existing pair directory is never replaced silently: ``check_free`` refuses before any work starts, and only
``overwrite=True`` swaps a finished new directory in for the old one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl.errors import UserError
from precision_rl.fileio import atomic_dir, atomic_write_json
from precision_rl.mismatch.layout import EXACT_KL, MANIFEST, SEQUENCES, SUMMARY, TOKENS
from precision_rl.mismatch.recompute import Recompute
from precision_rl.mismatch.sampling import Sample
from precision_rl.paths import mismatch_root


def model_root(slug: str) -> Path:
    """Return ``<runs root>/mismatch/<model slug>``."""
    return mismatch_root() / slug


def check_free(dirs: list[Path], overwrite: bool) -> None:
    """Raise a UserError naming the result directories that already exist, unless ``overwrite``."""
    taken = [str(d) for d in dirs if d.exists()]
    if taken and not overwrite:
        raise UserError(f"mismatch results already exist: {', '.join(taken)} (pass --overwrite / OVERWRITE=1 to "
                        "replace them, or --name to write under another model name)")


def token_table(samples: list[Sample], rec: Recompute) -> pd.DataFrame:
    """Return tokens.parquet's table for the kept samples: seq_id, position, token_id, logp_infer, logp_train
    (and exact_kl, the full-vocab KL(mu||pi) at that position, when mu was sampled with the full vocabulary)."""
    kept = [(s, k) for k, s in enumerate(samples) if s.seq_id not in rec.dropped]
    lengths = [len(s.response_ids) for s, _ in kept]
    frame = pd.DataFrame({
        "seq_id": np.repeat(np.array([s.seq_id for s, _ in kept], dtype=np.int64), lengths),
        "position": np.concatenate([np.arange(n, dtype=np.int64) for n in lengths] or [np.zeros(0, np.int64)]),
        "token_id": np.array([t for s, _ in kept for t in s.response_ids], dtype=np.int64),
        "logp_infer": np.concatenate([s.logp_infer for s, _ in kept] or [np.zeros(0)]).astype(np.float64),
        "logp_train": np.concatenate([rec.logp_train[k] for _, k in kept] or [np.zeros(0)]).astype(np.float64),
    })
    if kept and all(rec.exact_kl[k] is not None for _, k in kept):
        frame[EXACT_KL] = np.concatenate([rec.exact_kl[k] for _, k in kept]).astype(np.float64)
    return frame


def write_pair(out_dir: Path, tokens: pd.DataFrame, sequences: pd.DataFrame, summary: dict, manifest: dict,
               overwrite: bool) -> Path:
    """Write one pair's directory atomically (built beside it, then renamed into place); return it."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    check_free([out_dir], overwrite)
    with atomic_dir(out_dir) as tmp:
        tokens.to_parquet(tmp / TOKENS, index=False)
        sequences.to_parquet(tmp / SEQUENCES, index=False)
        atomic_write_json(tmp / SUMMARY, summary)
        atomic_write_json(tmp / MANIFEST, manifest)
    return out_dir


def update_summary(out_dir: Path, **fields) -> dict:
    """Merge ``fields`` into a pair's summary.json (atomically) and return the new summary."""
    doc = json.loads((out_dir / SUMMARY).read_text())
    doc.update(fields)
    atomic_write_json(out_dir / SUMMARY, doc)
    return doc


def read_pair(out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Return (tokens, sequences, summary) of a pair directory."""
    out_dir = Path(out_dir)
    return (pd.read_parquet(out_dir / TOKENS), pd.read_parquet(out_dir / SEQUENCES),
            json.loads((out_dir / SUMMARY).read_text()))
