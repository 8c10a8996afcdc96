"""Every source the suite cites lives in the repository: ``docs/<file>.md#<section>`` references resolve."""

import re
import subprocess

import pytest
import yaml

from precision_rl.config import docs_refs
from precision_rl.config.registry import EXPERIMENTS_DIR
from precision_rl.paths import REPO_ROOT

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".cfg", ""}
# Relative Markdown links to a page of the repository: [text](../other/page.md#section) or [text](#section).
DOC_LINK = re.compile(r"\]\(((?:[\w./-]+\.md)?)(?:#([\w-]+))?\)")
# Tests that cite broken or outside references on purpose, to see them refused.
CITE_BAD_ON_PURPOSE = {"test_docs_refs.py", "test_registry.py"}


def _tracked_text_files():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [REPO_ROOT / p for p in listed if (REPO_ROOT / p).suffix in TEXT_SUFFIXES and (REPO_ROOT / p).is_file()]


@pytest.mark.parametrize("heading,expected", [
    ("Suite settings", "suite-settings"),
    ("The authors' FP16 patch", "the-authors-fp16-patch"),
    ("E12 Dense-14B DAPO", "e12-dense-14b-dapo"),
    ("Fig 5 offline mismatch", "fig-5-offline-mismatch"),
    ("`make list` and `[A]`", "make-list-and-a"),
])
def test_anchor_follows_github(heading, expected):
    assert docs_refs.anchor(heading) == expected


def test_anchors_skip_code_and_number_repeats(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n## Notes\n```\n## not a heading\n```\n## Notes\n")
    assert docs_refs.anchors(page) == {"top", "notes", "notes-1"}


def test_unresolved_names_missing_file_and_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("## Here\n")
    text = "docs/a.md#here and docs/a.md#there and docs/b.md#here"
    assert docs_refs.references(text) == [("a.md", "here"), ("a.md", "there"), ("b.md", "here")]
    assert docs_refs.unresolved(text, docs_dir=tmp_path) == ["docs/a.md#there", "docs/b.md#here"]


def test_every_sources_entry_of_every_experiment_file_resolves():
    entries = 0
    for path in sorted(EXPERIMENTS_DIR.rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        blocks = [doc.get("sources") or {}] + [body.get("sources") or {} for body in (doc.get("scales") or {}).values()]
        for sources in blocks:
            for key, text in sources.items():
                entries += 1
                where = f"{path.relative_to(REPO_ROOT)} sources.{key}"
                assert docs_refs.references(text), f"{where} cites no docs/<file>.md#<section>: {text!r}"
                assert not docs_refs.unresolved(text), f"{where}: {docs_refs.unresolved(text)}"
    assert entries > 150


def test_every_docs_reference_in_the_repository_resolves():
    cited = 0
    for path in _tracked_text_files():
        if path.name in CITE_BAD_ON_PURPOSE:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        cited += len(docs_refs.references(text))
        assert not docs_refs.unresolved(text), f"{path.relative_to(REPO_ROOT)}: {docs_refs.unresolved(text)}"
    assert cited > 150


def test_links_between_the_repositorys_pages_resolve():
    pages = [p for p in _tracked_text_files() if p.suffix == ".md"]
    checked = 0
    for page in pages:
        for target, section in DOC_LINK.findall(page.read_text()):
            if target.startswith(("http", "/")):
                continue
            path = (page.parent / target).resolve() if target else page
            shown = page.relative_to(REPO_ROOT)
            assert path.is_file(), f"{shown} links to missing {target}"
            if section:
                checked += 1
                assert section in docs_refs.anchors(path), f"{shown} links to {target}#{section}, no such heading"
    assert checked > 20


def test_nothing_cites_notes_outside_the_repository():
    outside = re.compile(r"\.\./shared/research|research/\w+\.md|\b(paper_spec|verl_spec|cpu_probe|verl_cpu)\b")
    for path in _tracked_text_files():
        if path.name in CITE_BAD_ON_PURPOSE:
            continue
        found = outside.search(path.read_text(encoding="utf-8", errors="replace"))
        assert found is None, f"{path.relative_to(REPO_ROOT)} cites {found.group(0)!r}, which is not in the repository"
