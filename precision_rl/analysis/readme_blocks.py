"""Blocks of results/README.md that the suite writes from the committed logs: each between an opening and a closing
comment, replaced in place (never added, moved or duplicated), so that the numbers in them are always the logs'."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from precision_rl.config.scale import TINY
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_text

README_SCALE = TINY  # the scale the README's blocks show: the one every reader can run


@dataclass(frozen=True)
class ReadmeBlock:
    """A README block: the comment lines that open and close it."""

    begin: str
    end: str

    def render(self, body: str) -> str:
        """Return the block with ``body`` between its markers."""
        return f"{self.begin}\n{body}\n{self.end}"

    def replace(self, text: str, body: str) -> str:
        """Return ``text`` with this block's content replaced by ``body``; UserError unless ``text`` holds the
        block exactly once."""
        pattern = re.compile(re.escape(self.begin) + r".*?" + re.escape(self.end), re.DOTALL)
        if len(pattern.findall(text)) != 1:
            raise UserError(f"the README needs exactly one block from {self.begin!r} to {self.end!r}")
        block = self.render(body)
        return pattern.sub(lambda _: block, text)


def update_readme(readme: Path, blocks: list[tuple[ReadmeBlock, str]]) -> bool:
    """Rewrite each block of ``readme`` with its body (all or none: a missing block raises before anything is
    written); return whether the file changed."""
    text = Path(readme).read_text()
    updated = text
    for block, body in blocks:
        updated = block.replace(updated, body)
    if updated != text:
        atomic_write_text(Path(readme), updated)
    return updated != text


def write_block(path: Path | None, block: ReadmeBlock, body: str) -> None:
    """Rewrite ``block`` of the file at ``path`` with ``body`` (nothing where ``path`` is None), saying so on stderr
    when the file changed."""
    if path is not None and update_readme(Path(path), [(block, body)]):
        print(f"wrote {path}", file=sys.stderr)
