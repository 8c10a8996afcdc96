"""References into the project's own documentation (``docs/<file>.md#<section>``) and whether they resolve.

Experiment files cite where each value comes from by such a reference; a reference resolves when the file exists
under ``docs/`` and one of its headings has that anchor, computed as GitHub computes heading anchors. Loading an
experiment checks only that a source cites one (``references``); that each resolves is checked by the test suite
(tests/config/test_docs_refs.py), so that editing a page of docs/ cannot break loading an experiment.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from precision_rl.paths import DOCS_DIR

REFERENCE = re.compile(r"docs/([\w./-]+?\.md)#([\w-]+)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^(```|~~~)")


def anchor(heading: str) -> str:
    """Return GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Return the anchors of every heading in the Markdown file at ``path`` (repeated headings get ``-1``, ``-2``)."""
    found: list[str] = []
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            base = anchor(match.group(1))
            found.append(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return frozenset(found)


def references(text: str) -> list[tuple[str, str]]:
    """Return every ``(file, anchor)`` that ``text`` cites as ``docs/<file>.md#<anchor>``, in order."""
    return REFERENCE.findall(text)


def unresolved(text: str, docs_dir: Path = DOCS_DIR) -> list[str]:
    """Return the references in ``text`` that name a missing file or heading, as ``docs/<file>#<anchor>`` strings."""
    missing = []
    for name, section in references(text):
        path = docs_dir / name
        if not path.is_file() or section not in anchors(path):
            missing.append(f"docs/{name}#{section}")
    return missing
