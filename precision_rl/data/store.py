"""Where datasets live and how they are written: verl rows, atomic parquet files, example JSON, MANIFEST.json."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from precision_rl.fileio import atomic_write_text, temp_beside
from precision_rl.reward.templates import chat_prompt

MANIFEST_NAME = "MANIFEST.json"
ABILITY = "math"


def dataset_dir(root: Path, name: str, template: str | None = None, default_template: str | None = None) -> Path:
    """Return the folder of dataset ``name`` under ``root``; a template other than the recipe's default gets a
    sub-folder (``data/math500/r1/``), so one recipe can serve experiments that prompt differently."""
    base = Path(root) / name
    return base if template is None or template == default_template else base / template


def make_row(data_source: str, question: str, answer: Any, template: str, split: str, index: int,
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return one verl RL row (``data_source``, chat ``prompt``, ``ability``, ``reward_model``, ``extra_info``)."""
    info = {"split": split, "index": index, "question": question, "template": template}
    info.update(extra or {})
    return {
        "data_source": data_source,
        "prompt": chat_prompt(question, template),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": info,
    }


def write_parquet_tmp(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` as parquet to a temporary file next to ``path``; return the temporary path (rename it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path)
    try:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_text_tmp(text: str, path: Path) -> Path:
    """Write ``text`` to a temporary file next to ``path``; return the temporary path (rename it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path)
    tmp.write_text(text)
    return tmp


def commit_files(pairs: list[tuple[Path, Path]]) -> None:
    """Rename each (temporary, final) pair into place; on failure remove the temporaries not yet renamed."""
    done = 0
    try:
        for tmp, final in pairs:
            os.replace(tmp, final)
            done += 1
    finally:
        for tmp, _ in pairs[done:]:
            tmp.unlink(missing_ok=True)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Return the rows of a parquet file as Python dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


@contextlib.contextmanager
def _locked(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{MANIFEST_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_manifest(root: Path) -> dict[str, Any]:
    """Return ``<root>/MANIFEST.json`` as a dict (empty when there is none yet)."""
    path = Path(root) / MANIFEST_NAME
    return json.loads(path.read_text()) if path.is_file() else {}


def update_manifest(root: Path, key: str, entry: dict[str, Any]) -> None:
    """Set ``MANIFEST.json[key] = entry`` (with a UTC build time) atomically, under a file lock."""
    root = Path(root)
    with _locked(root):
        manifest = read_manifest(root)
        manifest[key] = {**entry, "built_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        atomic_write_text(root / MANIFEST_NAME, json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
