"""The words a run ends with: what it showed, set against the committed runs of its configuration and arm.

``make run`` (and the shortcuts) print one line per finished run: its training reward from the first step to the
trailing mean at its last, its held-out accuracy from the first validation to the last, the BF16/FP16 mismatch ratio
where the other arm of the same configuration and seed ran too, and the regression gate's verdict: whether each point
lies in the committed band (``checks.regression/band``) and whether the run repeats the committed run of its seed bit
for bit or drifted from it (``regression/repeat``, ``regression/drift``).
"""

from __future__ import annotations

from pathlib import Path

from precision_rl import metrics as M
from precision_rl.analysis.checks import CheckResult, CommittedRuns, final_reward, run_checks
from precision_rl.analysis.logs import load_committed_tables, load_runs
from precision_rl.analysis.series import SeriesIndex
from precision_rl.paths import committed_run_roots

NO_BAND = ("no committed run of its configuration and arm: nothing to place it against (publish finished runs of "
           "the configuration with make publish EXP=..., or run the profile the committed runs were made in)")


def committed_runs() -> CommittedRuns:
    """Return the committed runs (published logs and reference runs), one table per root and CPU kind."""
    return CommittedRuns.of([table for root in committed_run_roots() for table in load_committed_tables(root)])


def _span(series, fmt: str = "{:.3f}") -> str | None:
    series = series.dropna() if series is not None else None
    if series is None or series.empty:
        return None
    first = f"{fmt.format(series.iloc[0])} at step {int(series.index[0])}"
    return first if len(series) == 1 else f"{first} -> {fmt.format(series.iloc[-1])} at step {int(series.index[-1])}"


def _verdict(results: list[CheckResult]) -> str:
    rules = {r.rule: r for r in results}
    parts = []
    band = rules.get("regression/band")
    if band is None:
        parts.append(NO_BAND)
    else:
        parts.append(f"band {band.status.upper()} ({band.note})")
    for rule in ("regression/repeat", "regression/drift"):
        if rule in rules:
            result = rules[rule]
            parts.append(f"{rule.split('/')[1]} {result.status.upper()} ({result.note.split(': ', 1)[-1]})")
    return "; ".join(parts)


def closing_lines(run_dirs: list[Path], committed: CommittedRuns | None = None) -> list[str]:
    """Return one line per run in ``run_dirs`` saying in words what it showed (see the module docstring)."""
    table = load_runs(list(run_dirs), progress=False)
    committed = committed_runs() if committed is None else committed
    index = SeriesIndex(table.metrics)
    results = run_checks(table, reference=committed)
    rows = table.runs.to_dict("records")
    lines = []
    for run in rows:
        name, scale = str(run["run"]), str(run["scale"])
        reward = index.quantity(scale, name, M.REWARD_Q)
        final = final_reward(index, scale, name)
        words = []
        if reward is not None and not reward.dropna().empty and final is not None:
            words.append(f"training reward {reward.dropna().iloc[0]:.3f} at step {int(reward.dropna().index[0])} -> "
                         f"{final[0]:.3f} (trailing mean) at step {final[1]}")
        val = M.val_metric(index.logged(scale, name), next(iter(M.val_data_sources(index.logged(scale, name))), ""))
        if val and (held := _span(index.get(scale, name, val))):
            words.append(f"held-out accuracy {held}")
        twin = next((o for o in rows if o is not run and o["config"] == run["config"] and o["seed"] == run["seed"]
                     and {o["precision_train"], run["precision_train"]} == {"fp16", "bf16"}), None)
        if twin is not None and run["precision_train"] == "bf16":
            ratios = []
            for quantity in (M.MEAN_ABS_DIFF_Q, M.TOKEN_KL_Q):
                mine, theirs = index.quantity(scale, name, quantity), index.quantity(scale, str(twin["run"]), quantity)
                if mine is not None and theirs is not None and not theirs.empty and float(theirs.median()) > 0:
                    ratios.append(f"{quantity.label} x{float(mine.median()) / float(theirs.median()):.1f}")
            if ratios:
                words.append("BF16/FP16 mismatch (medians over steps): " + ", ".join(ratios))
        words.append(_verdict([r for r in results if r.run == name]))
        lines.append(f"{name}: " + "; ".join(words))
    return lines
