"""Atomic file writes: write to a temporary file in the same folder, then rename over the target.

A reader (or a crashed writer) never sees a half-written table or figure: the target is either the old file or the
complete new one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success rename it to ``target``, on error delete it.

    The temporary name keeps the target's suffix, so libraries that pick a format from the suffix still work.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.tmp{os.getpid()}{target.suffix}")
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
