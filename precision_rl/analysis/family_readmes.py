"""The block of each ``experiments/<family>/README.md`` that the suite writes: the family's experiments as the registry
resolves them (algorithm, arms, model per scale, paper panels, the command) and what their published tiny runs ended
at (``results/summary.csv``, itself written from ``results/logs``).

``python -m precision_rl.analysis.family_readmes [--write]`` prints every family's block, and with ``--write``
rewrites it in each README; ``make published-results`` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl.analysis.progress import family_line, grid_progress
from precision_rl.analysis.readme_blocks import ReadmeBlock, write_block
from precision_rl.analysis.series import TRAIL_WINDOW
from precision_rl.analysis.tables import SUMMARY_CSV
from precision_rl.config import registry
from precision_rl.config.scale import PAPER, TINY
from precision_rl.console import render_table
from precision_rl.paths import RESULTS_DIR

README = "README.md"
BLOCK = ReadmeBlock("<!-- experiments of this family: written by `make published-results` from the registry and "
                    "results/logs -->", "<!-- end of experiments of this family -->")


def families(root: Path = registry.EXPERIMENTS_DIR) -> dict[str, list[str]]:
    """Return each family (the folder under ``experiments/``) with its experiments' names, sorted."""
    out: dict[str, list[str]] = {}
    for name in sorted(registry.experiment_files(root)):
        out.setdefault(name.split("/")[0], []).append(name)
    return out


def _published(summary: pd.DataFrame, experiment: str, arm: str) -> str:
    rows = summary[(summary["scale"] == TINY) & (summary["experiment"] == experiment) & (summary["precision"] == arm)
                   & (summary["status"] == "finished")]
    if rows.empty:
        return "-"
    rewards = rows["final_reward"].to_numpy(dtype=float)
    steps = sorted(set(rows["last_step"].astype(int)))
    seeds = ", ".join(str(s) for s in sorted(rows["seed"].astype(int)))
    spread = f"{np.mean(rewards):.3f}" if len(rewards) == 1 else \
        f"{np.mean(rewards):.3f} ({rewards.min():.3f} to {rewards.max():.3f})"
    plural = "s" if len(rows) > 1 else ""
    return f"seed{plural} {seeds}, step {'/'.join(map(str, steps))}: {spread}"


def section(family: str, summary: pd.DataFrame, root: Path = registry.EXPERIMENTS_DIR,
            progress: pd.DataFrame | None = None) -> str:
    """Return the block's body for ``family``: one row per experiment, then its tiny-scale runs finished and the time
    the rest take (``progress``: ``progress.grid_progress`` of ``summary``, computed here when not given)."""
    rows = []
    for name in families(root)[family]:
        paper = registry.load_experiment(name, PAPER, root)
        panels = ", ".join(p.panel + (f" ({p.precision})" if p.precision else "") for p in paper.paper) or \
            (f"variant of `{paper.variant_of}`" if paper.variant_of else "-")
        arms = ", ".join(a.label + ("*" if paper.runs_at_tiny_scale_only(a) else "") for a in paper.arms)
        published = "; ".join(f"{a.label}: {found}" for a in paper.arms
                              if (found := _published(summary, name, a.label)) != "-") or "-"
        rows.append([f"`{name}`", paper.algorithm, arms, f"{paper.model} ({paper.backend})", panels, published])
    progress = grid_progress(summary, root=root) if progress is None else progress
    time_line = f"\n\n{line}" if (line := family_line(progress, family, TINY)) else ""
    table = render_table(rows, ["experiment", "algorithm", "arms (*: tiny scale only)", "paper scale", "paper panels",
                                f"published tiny runs: final training reward (trailing {TRAIL_WINDOW})"],
                         markdown=True, floatfmt="")
    return (f"From the registry and the published runs' summary (`results/{SUMMARY_CSV}`; '-': none published on the "
            f"current instrument). `make show EXP=<name>` resolves an experiment, `make run EXP=<name> "
            f"[PRECISION=<arm>]` runs it; at tiny scale every experiment trains the shipped tiny model with FSDP on a "
            f"CPU, and its numbers are tiny scale (CPU).\n\n{table}{time_line}")


def read_summary(results: Path = RESULTS_DIR) -> pd.DataFrame:
    """Return the published runs' summary table (empty where none was written)."""
    path = Path(results) / SUMMARY_CSV
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(
        columns=["scale", "experiment", "precision", "seed", "status", "profile", "last_step", "final_reward",
                 "wall_time_s"])


def main(argv: list[str] | None = None) -> int:
    """Print each family's block; with ``--write`` rewrite it in ``experiments/<family>/README.md``; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the block in each family's README")
    args = parser.parse_args(argv)
    summary = read_summary()
    progress = grid_progress(summary)
    for family in families():
        body = section(family, summary, progress=progress)
        print(f"## {family}\n\n{body}\n")
        write_block(registry.EXPERIMENTS_DIR / family / README if args.write else None, BLOCK, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
