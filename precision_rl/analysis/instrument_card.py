"""The tiny instrument's own numbers (docs/tiny.md), read from the published calibrated runs of the sanity test: what
each arm ends at over its seeds, what a step costs and how much memory a run takes, per CPU kind.

``python -m precision_rl.analysis.instrument_card [--doc docs/tiny.md]`` prints the block, and rewrites it where
``--doc`` names a file that holds it; ``make published-results`` does.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl.analysis.logs import load_run_dir, run_dirs_under
from precision_rl.analysis.readme_blocks import ReadmeBlock, write_block
from precision_rl.analysis.series import TRAIL_WINDOW, trailing_mean
from precision_rl.config.profiles import CALIBRATED
from precision_rl.config.registry import INSTRUMENT_EXPERIMENT
from precision_rl.config.scale import TINY
from precision_rl.console import render_table
from precision_rl.launch import eta, runs
from precision_rl.metrics import REWARD, STEP_TIME, TIMING_PREFIX, val_metric
from precision_rl.paths import logs_root
from precision_rl.tiny.data import VAL_RECIPE

PHASES = (("gen", "generation"), ("old_log_prob", "old log-probs"), ("update_actor", "updates"))
DOC_BLOCK = ReadmeBlock("<!-- instrument numbers (tiny scale): written by `make published-results` from results/logs -->",
                        "<!-- end of instrument numbers -->")
README_BLOCK = ReadmeBlock("<!-- sanity verdicts (tiny scale): written by `make published-results` from results/logs -->",
                           "<!-- end of sanity verdicts -->")


@dataclass(frozen=True)
class RunNumbers:
    """One published calibrated run's end point and cost."""

    arm: str
    seed: int
    cpu: str
    last_step: int
    final_reward: float  # trailing mean over TRAIL_WINDOW steps at the last step
    heldout_first: float  # held-out accuracy at the first validation (step 0)
    heldout_last: float  # and at the last one
    step_seconds: float  # median over steps of verl's timing_s/step
    phase_seconds: tuple[float, ...]  # medians of the PHASES, in their order
    peak_memory_gib: float | None  # the largest over the run's attempts (None where none recorded it)


def run_numbers(run_dir: Path) -> RunNumbers | None:
    """Return the numbers of the run in ``run_dir``, or None when it logged no reward or no validation."""
    loaded = load_run_dir(run_dir)
    frame = pd.DataFrame({"step": loaded.steps, "name": loaded.names, "value": pd.to_numeric(loaded.values,
                                                                                            errors="coerce")})
    series = {name: group.groupby("step")["value"].last().dropna() for name, group in frame.groupby("name")}
    val_name = val_metric(set(series), VAL_RECIPE)
    if REWARD not in series or val_name is None or series[val_name].empty:
        return None
    doc = runs.read_manifest(run_dir)
    peaks = [a["peak_memory_gib"] for a in doc.get("attempts") or [] if a.get("peak_memory_gib") is not None]
    reward = trailing_mean(series[REWARD])
    val = series[val_name]
    trained = series.get(STEP_TIME, pd.Series(dtype=float))
    return RunNumbers(
        arm=loaded.info.precision, seed=loaded.info.seed, cpu=eta.cpu_label(doc.get("hardware") or {}),
        last_step=int(reward.index[-1]), final_reward=float(reward.iloc[-1]), heldout_first=float(val.iloc[0]),
        heldout_last=float(val.iloc[-1]), step_seconds=float(np.median(trained)) if len(trained) else float("nan"),
        phase_seconds=tuple(float(np.median(series[TIMING_PREFIX + key])) if TIMING_PREFIX + key in series
                            else float("nan") for key, _ in PHASES),
        peak_memory_gib=max(peaks) if peaks else None)


def published_numbers(root: Path, experiment: str = INSTRUMENT_EXPERIMENT) -> list[RunNumbers]:
    """Return the numbers of every finished calibrated tiny run of ``experiment`` under ``root``, by arm and seed."""
    found = []
    for run_dir in run_dirs_under(root):
        doc = runs.read_manifest(run_dir)
        if (doc.get("experiment"), doc.get("scale"), runs.profile_name(doc), runs.effective_status(doc)) \
                != (experiment, TINY, CALIBRATED, "finished"):
            continue
        if (numbers := run_numbers(run_dir)) is not None:
            found.append(numbers)
    return sorted(found, key=lambda n: (n.arm, n.seed))


def _spread(values: list[float], digits: int = 3, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{np.mean(values):{sign}.{digits}f} ({min(values):{sign}.{digits}f} to {max(values):{sign}.{digits}f})"


def ending_table(numbers: list[RunNumbers]) -> str:
    """Return the table of each arm's seeds and where they end: training reward and held-out accuracy."""
    arms = sorted({n.arm for n in numbers})
    rows = [[arm.upper(), ", ".join(str(n.seed) for n in numbers if n.arm == arm),
             _spread([n.final_reward for n in numbers if n.arm == arm]),
             _spread([n.heldout_first for n in numbers if n.arm == arm]),
             _spread([n.heldout_last - n.heldout_first for n in numbers if n.arm == arm], signed=True)]
            for arm in arms]
    last = max(n.last_step for n in numbers)
    return render_table(rows, ["arm", "seeds", f"training reward at step {last} (trailing {TRAIL_WINDOW}): mean "
                               "(min to max)", "held-out accuracy at step 0", f"its change by step {last}"],
                        markdown=True, floatfmt="")


def cost_table(numbers: list[RunNumbers]) -> str:
    """Return the table of each arm's step cost and peak memory per CPU kind."""
    rows = []
    for arm in sorted({n.arm for n in numbers}):
        for cpu in sorted({n.cpu for n in numbers if n.arm == arm}):
            group = [n for n in numbers if n.arm == arm and n.cpu == cpu]
            phases = " / ".join(f"{np.median([n.phase_seconds[k] for n in group]):.1f}" for k in range(len(PHASES)))
            peaks = [n.peak_memory_gib for n in group if n.peak_memory_gib is not None]
            rows.append([arm.upper(), cpu, str(len(group)), f"{np.median([n.step_seconds for n in group]):.1f}",
                         phases, f"{max(peaks):.2f}" if peaks else "-"])
    return render_table(rows, ["arm", "CPU", "runs", "median step (s)",
                               " / ".join(label for _, label in PHASES) + " (s)", "peak memory (GiB)"],
                        markdown=True, floatfmt="")


def _none(experiment: str) -> str:
    return f"(no finished calibrated run of {experiment} is published under results/logs)"


def section(root: Path, experiment: str = INSTRUMENT_EXPERIMENT) -> str:
    """Return docs/tiny.md's block: per arm, the seeds' end points with their spread; per arm and CPU kind, the
    cost."""
    numbers = published_numbers(root, experiment)
    if not numbers:
        return _none(experiment)
    return (f"The published calibrated runs of `{experiment}` (tiny scale, CPU; `results/logs/`). Held-out accuracy "
            f"is verl's validation (mean@4 at T=0.6 on the 128 held-out problems).\n\n{ending_table(numbers)}\n\n"
            f"What a step costs, as verl timed it (median over each run's steps, then over its runs), and the largest "
            f"memory of a run's processes over its attempts:\n\n{cost_table(numbers)}")


def readme_section(root: Path, experiment: str = INSTRUMENT_EXPERIMENT) -> str:
    """Return the README's block: the seeds' end points per arm."""
    numbers = published_numbers(root, experiment)
    if not numbers:
        return _none(experiment)
    return (f"`{experiment}`'s published calibrated runs, tiny scale (CPU); held-out accuracy is verl's validation "
            f"(mean@4, T=0.6):\n\n{ending_table(numbers)}")


def main(argv: list[str] | None = None) -> int:
    """Print docs/tiny.md's block; rewrite it in ``--doc`` and the README's in ``--readme`` where given; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", type=Path, help="a file holding the instrument-numbers block, rewritten in place")
    parser.add_argument("--readme", type=Path, help="a file holding the sanity-verdicts block, rewritten in place")
    parser.add_argument("--logs", type=Path, default=None, help="committed run logs (default results/logs)")
    args = parser.parse_args(argv)
    root = args.logs or logs_root()
    body = section(root)
    print(body)
    write_block(args.doc, DOC_BLOCK, body)
    write_block(args.readme, README_BLOCK, readme_section(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
