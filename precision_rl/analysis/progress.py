"""How far the grid is (``make tables`` → ``results/grid_progress.{csv,md}``): every run the registry plans at a
scale (experiment x precision arm x seed, the runs ``make grid`` makes) against the finished runs of a run table.

results/README.md's grid block is the tiny-scale section, rewritten by ``make published-results`` from the committed
logs,
so that the count of done runs is never typed by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl.analysis.readme_blocks import README_SCALE, ReadmeBlock
from precision_rl.analysis.tables import write_csv_and_markdown
from precision_rl.config import registry
from precision_rl.config.profiles import DEFAULT_PROFILE, profile_for
from precision_rl.config.scale import SCALES
from precision_rl.console import render_table
from precision_rl.launch.runs import FINISHED
from precision_rl.paths import EXPERIMENTS_DIR

PROGRESS_COLUMNS = ("scale", "family", "experiment", "arms", "seeds", "planned", "finished", "not_run",
                    "finished_wall_s", "median_wall_s", "not_run_estimate_s")
PROGRESS_CSV, PROGRESS_MD = "grid_progress.csv", "grid_progress.md"
README_BLOCK = ReadmeBlock(
    "<!-- grid progress (tiny scale): written by `make published-results` from results/logs -->",
    "<!-- end of grid progress -->")
HEADERS = ["experiment", "seeds", "finished", "median wall time", "not run yet"]


def _not_run_text(missing: list[tuple[str, int]], planned: list[tuple[str, int]]) -> str:
    """Return the missing runs, arms that lack the same seeds together (``fp16, bf16: s1 s7``); ``all`` where none
    has run, ``""`` where all have."""
    if not missing or len(missing) == len(planned):
        return "all" if missing else ""
    by_arm: dict[str, list[int]] = {}
    for arm, seed in missing:
        by_arm.setdefault(arm, []).append(seed)
    by_seeds: dict[tuple[int, ...], list[str]] = {}
    for arm, seeds in by_arm.items():
        by_seeds.setdefault(tuple(seeds), []).append(arm)
    return "; ".join(f"{', '.join(arms)}: " + " ".join(f"s{seed}" for seed in seeds) for seeds, arms in by_seeds.items())


def _median(values: pd.Series) -> float:
    """Return the median of the finite ``values`` (NaN for none)."""
    values = values.dropna()
    return float(values.median()) if len(values) else np.nan


def grid_progress(summary: pd.DataFrame, scales: tuple[str, ...] = SCALES,
                  root: Path = EXPERIMENTS_DIR) -> pd.DataFrame:
    """Return one row per scale and registered experiment (columns PROGRESS_COLUMNS): the runs the grid plans,
    how many of them ``summary`` (``tables.summarize``) holds as finished, the ones not run yet, the median wall time
    of the finished ones, and an estimate of the time the others take.

    A finished run counts where its experiment, precision label and seed are one the registry plans; runs of
    other seeds or arms (a single ``make run`` with another SEED) are not counted. The estimate gives each run not
    made yet the median wall time of its family's finished runs in the profile ``make grid`` runs (more runs than an
    experiment's two or three, so less moved by one run that shared the cores), else of all the scale's runs in that
    profile: a calibrated tiny run takes ~8x a quick one.
    """
    finished = summary[summary["status"] == FINISHED].assign(seed=lambda f: f["seed"].astype(int))
    keys = zip(finished["scale"], finished["experiment"], finished["precision"], finished["seed"], strict=True)
    wall = {key: (float(w), str(profile)) for key, w, profile in
            zip(keys, finished["wall_time_s"], finished["profile"], strict=True)}
    rows = []
    for scale in scales:
        for name, spec in registry.load_all(scale, root).items():
            planned = [(arm.label, seed) for arm in spec.scale_arms for seed in spec.seeds]
            if not planned:
                continue  # an experiment that runs at tiny scale only
            done = [wall[(scale, name, arm, seed)] for arm, seed in planned if (scale, name, arm, seed) in wall]
            walls = [w for w, _ in done]
            grid_profile = profile_for(spec, DEFAULT_PROFILE).name
            missing = [(arm, seed) for arm, seed in planned if (scale, name, arm, seed) not in wall]
            rows.append({"scale": scale, "family": spec.family, "experiment": name,
                         "arms": ", ".join(a.label for a in spec.scale_arms), "seeds": " ".join(map(str, spec.seeds)),
                         "planned": len(planned), "finished": len(walls), "not_run": _not_run_text(missing, planned),
                         "finished_wall_s": float(sum(walls)), "median_wall_s": _median(pd.Series(walls, dtype=float)),
                         "grid_walls": [w for w, profile in done if profile == grid_profile]})
    frame = pd.DataFrame(rows)
    estimate = pd.Series(np.nan, index=frame.index)
    for keys in (["scale", "family"], ["scale"]):
        pooled = frame.groupby(keys)["grid_walls"].transform(
            lambda walls: _median(pd.Series([w for run_walls in walls for w in run_walls], dtype=float)))
        estimate = estimate.fillna(pooled.astype(float))
    frame["not_run_estimate_s"] = (frame["planned"] - frame["finished"]) * estimate
    return frame[list(PROGRESS_COLUMNS)]


def _hours(seconds: float) -> str:
    """Return ``seconds`` as hours with one decimal (``8.4 h``)."""
    return f"{seconds / 3600:.1f} h"


def family_line(progress: pd.DataFrame, family: str, scale: str) -> str:
    """Return one sentence on ``family`` at ``scale``: its runs finished of those planned and the time they took, and
    the estimated time of the rest (the estimate ``grid_progress`` gives); empty where the family plans none."""
    group = progress[(progress["scale"] == scale) & (progress["family"] == family)]
    planned, finished = int(group["planned"].sum()), int(group["finished"].sum())
    if not planned:
        return ""
    line = f"At {scale} scale, {finished} of the {planned} runs this family plans have finished"
    if finished:
        line += f" ({_hours(group['finished_wall_s'].sum())} in all)"
    estimated = group["not_run_estimate_s"].sum()
    if finished < planned:
        line += f"; `make grid EXP='{family}/*' SCALE={scale}` runs the other {planned - finished}"
        line += (f", about {_hours(estimated)} at the median wall time of the family's runs in the profile the grid "
                 "runs (of the scale's, where the family has none)" if estimated > 0
                 else ", whose time no finished run here estimates yet")
    return line + "."


def scale_section(progress: pd.DataFrame, scale: str) -> str:
    """Return the Markdown of one scale: the totals (all, then per family), the time the finished runs took and an
    estimate of the rest, the command that runs the rest, and one table row per experiment."""
    group = progress[progress["scale"] == scale]
    planned, finished = int(group["planned"].sum()), int(group["finished"].sum())
    families = group.groupby("family", sort=False)[["finished", "planned"]].sum()
    per_family = ", ".join(f"{family} {row.finished}/{row.planned}" for family, row in families.iterrows())
    if finished == planned:
        rest = "The grid is complete."
    else:
        rest = (f"`make grid SCALE={scale}` runs the other {planned - finished}, one after another, skipping the "
                f"finished and the published ones; ")
        estimated = group["not_run_estimate_s"].sum()
        rest += (f"at the median wall time of each run's family in the profile it runs (of all the scale's runs in "
                 f"that profile where its family has none yet) they take about {_hours(estimated)}."
                 if finished and estimated > 0 else
                 "no run of this scale has finished here in the profile it runs, so there is no wall time to "
                 "estimate them from.")
    rows = [[r.experiment, r.seeds, f"{r.finished}/{r.planned}",
             f"{r.median_wall_s:.0f} s" if np.isfinite(r.median_wall_s) else "—", r.not_run or "—"]
            for r in group.itertuples(index=False)]
    table = render_table(rows, HEADERS, markdown=True, floatfmt="")
    spent = f" and took {_hours(group['finished_wall_s'].sum())} in all" if finished else ""
    return (f"**{finished} of the {planned} runs the registry plans at {scale} scale have finished**{spent} "
            f"(by family: {per_family}). {rest}\n\n{table}")


def to_markdown(progress: pd.DataFrame) -> str:
    """Return the progress as a Markdown document: one section per scale, the definitions below."""
    parts = ["# The grid: runs planned and finished", ""]
    for scale in dict.fromkeys(progress["scale"]):
        parts += [f"## {scale} scale", "", scale_section(progress, scale), ""]
    parts += ["Planned: every precision arm of every registered experiment on each seed it names for the scale "
              "(`seeds` in the experiment files), the runs `make grid` makes. Finished: a run of that experiment, "
              "arm and seed whose status is finished in the run logs read (the committed copy: `results/logs/`). "
              "Wall time: the launcher's, from each run's manifest (`wall_time_s` in `summary.csv`), measured on "
              "the machine of the sitting that made the run and under its load (some shared the cores with other "
              "work); the estimate of the rest gives each run not made yet the median of its family's finished "
              "runs, else of all the scale's.",
              ""]
    return "\n".join(parts)


def write_progress(progress: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``grid_progress.csv`` and ``grid_progress.md`` into ``out_dir`` atomically; return both paths."""
    return write_csv_and_markdown(progress, to_markdown(progress), Path(out_dir) / PROGRESS_CSV,
                                  Path(out_dir) / PROGRESS_MD)


def readme_with_block(text: str, progress: pd.DataFrame) -> str:
    """Return ``text`` (a README) with its grid block replaced by the README_SCALE section of ``progress``."""
    return README_BLOCK.replace(text, scale_section(progress, README_SCALE))
