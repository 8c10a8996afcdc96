"""Tables the suite prints, rendered by tabulate: aligned text for the terminal, GitHub Markdown for the README."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tabulate import tabulate


def render_table(rows: Iterable[Sequence], headers: Sequence[str], markdown: bool = False, floatfmt: str = "g") -> str:
    """Return ``rows`` under ``headers`` as an aligned text table, or as a Markdown table when ``markdown``."""
    return tabulate(list(rows), headers=list(headers), tablefmt="github" if markdown else "simple",
                    floatfmt=floatfmt, disable_numparse=not floatfmt)
