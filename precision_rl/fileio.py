"""File helpers: a file's sha256, and atomic writes: build a file or folder under a temporary name beside its target, then rename it over the target.

A reader (or a crashed writer) never sees a half-written table, figure, manifest or model: the target is either the
old one or the complete new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path


def temp_beside(target: Path) -> Path:
    """Return an unused hidden path next to ``target`` that keeps its suffix (libraries pick formats by suffix)."""
    target = Path(target)
    return target.with_name(f".{target.stem}.{uuid.uuid4().hex[:12]}.tmp{target.suffix}")


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success rename it to ``target``, on error delete it."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(target: Path, text: str) -> Path:
    """Write ``text`` to ``target`` atomically; return ``target``."""
    with atomic_path(target) as tmp:
        tmp.write_text(text)
    return Path(target)


def atomic_write_json(target: Path, doc) -> Path:
    """Write ``doc`` as indented JSON (non-JSON values as strings) to ``target`` atomically; return ``target``."""
    return atomic_write_text(target, json.dumps(doc, indent=2, default=str) + "\n")


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a new empty folder next to ``target``; on success it replaces ``target`` (an old one is removed after).

    On error the temporary folder is removed and ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(target)
    tmp.mkdir()
    try:
        yield tmp
        old = temp_beside(target) if target.exists() else None
        if old is not None:
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Return the hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()
