"""Docs that match the code: no citation of a file outside the repository by name alone, no library internals cited
by line number (they move with every release; cite ``module.symbol`` with the version instead)."""

from __future__ import annotations

import re
import subprocess

from precision_rl.paths import REPO_ROOT

LINE_CITATION = re.compile(r"\b[\w/]+\.py:\d+")


def _tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split() if not p.startswith("results/logs/")]


def test_no_library_internals_are_cited_by_line_number():
    hits = [f"{path}: {m.group(0)}" for path in _tracked("*.py", "*.md", "*.yaml")
            for m in LINE_CITATION.finditer((REPO_ROOT / path).read_text())]
    assert hits == []


def test_no_document_outside_the_repository_is_cited_as_a_contract():
    outside = "DESIGN" + ".md"  # the team's design notes, which the repository does not hold
    hits = [path for path in _tracked("*.py", "*.md", "*.yaml") if outside in (REPO_ROOT / path).read_text()]
    assert hits == []
