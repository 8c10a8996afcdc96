"""The results side by side with the paper: per figure panel and scale, the paper's value, the suite's value per
precision arm with its band over seeds, and a verdict (``make tables`` → ``results/paper_comparison.{csv,md}``).

The paper's values live in ``docs/paper_values.yaml`` (``PaperComparison``), keyed by the panel ids of the registry
(the ``paper:`` lists of the experiment files), each citing the section of ``docs/`` it was read from. They are a
file of their own, not a field of the experiment files, because a value belongs to a panel rather than to an
experiment: Fig. 3 is fed by five experiments (four BF16 arms, one FP16 arm) and one experiment feeds several panels
(``sanity/grpo``: fig1a, fig2a, fig3, fig4, fork_ablation). Which runs feed a panel is written only in the
experiment files; ``registry_problems`` checks that the two agree: every panel of the file is fed by an experiment,
and every Fig. 1, 2, 3 and 5 panel of the registry has a value. Fig. 5 has no panel in the registry (it is the
offline tool's, ``make mismatch``); Fig. 4 and the ablations compare no FP16 arm with a BF16 one by a statistic
of ``make tables``, so none of them has a row; Table 2 (accuracy per validation set, with no verdict of direction)
has its own table, ``inference_table``.

A row compares one statistic of ``tables.summarize`` (the same definitions, none repeated here) between the FP16 and
the BF16 arm of a panel: Fig. 1 the final training reward (the trailing mean of ``series.summarize_reward``), Fig. 2
the peak validation accuracy (the paper's last evaluation points are single noisy values; its documented readings
are peaks), Fig. 3 the median over steps of the mismatch, whose BF16/FP16 ratio of the arms' means stands beside the
paper's. Each arm pools the runs the figures draw (finished, or read from a wandb export: ``figures.DRAWN_STATUSES``)
of every experiment whose arm of that precision feeds the panel (Fig. 3's BF16 arm pools four experiments) and shows
their mean, their min–max band and n, the number of runs.

Verdicts, in this order:

- "not comparable at this scale": the quantity has no counterpart at this scale: the reason is the paper-values
  entry's ``not_comparable`` for the scale (a stand-in without the panel's subject), or, for validation accuracy, that
  the scale's first validation set is not the paper's (the tiny set is not AIME 2024).
- "pending (no runs)": an experiment feeding an arm has no finished run with the statistic; the note names the
  ``make grid`` that runs it.
- "no difference resolved at this scale": an arm has fewer than ``MIN_RUNS`` runs (no band: "1 seed"), or the
  min–max bands overlap (bands that touch overlap); the note gives the difference of the means and the difference
  bands this wide could resolve (the mean of the two bands' widths).
- "reproduced in direction": the bands are apart and the difference of the arms' means has the paper's sign.
- "not reproduced": the bands are apart and the sign is the opposite ("opposite sign").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import yaml
from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic import StrictStr as Str
from pydantic.dataclasses import dataclass as schema

from precision_rl import metrics as M
from precision_rl.analysis.figures import DRAWN_STATUSES
from precision_rl.analysis.logs import RunTable
from precision_rl.analysis.panel_notes import grid_command
from precision_rl.analysis.series import TRAIL_WINDOW
from precision_rl.analysis.tables import summarize, write_csv_and_markdown
from precision_rl.config import docs_refs
from precision_rl.config.registry import ExperimentSpec, load_all
from precision_rl.config.scale import PAPER, SCALES
from precision_rl.console import render_table
from precision_rl.errors import UserError
from precision_rl.paths import DOCS_DIR, REPO_ROOT

PAPER_VALUES = DOCS_DIR / "paper_values.yaml"
COMPARISON_CSV, COMPARISON_MD = "paper_comparison.csv", "paper_comparison.md"
ARMS = ("fp16", "bf16")
# Figures whose every registry panel needs a paper value.
REQUIRED_FIGURES = ("fig1", "fig2", "fig3", "fig5")

REPRODUCED = "reproduced in direction"
NOT_REPRODUCED = "not reproduced"
NOT_COMPARABLE = "not comparable at this scale"
PENDING = "pending (no runs)"
NOT_RESOLVED = "no difference resolved at this scale"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_RESOLVED, NOT_COMPARABLE, PENDING)
OPPOSITE_SIGN, BANDS_OVERLAP, ONE_SEED = "opposite sign", "bands overlap", "1 seed"
MIN_RUNS = 2  # the fewest runs of an arm that make a band
ASSUMED_REWARD = ("absolute levels rest on the suite's assumed template, data and reward (docs/sources.md#assumptions): "
                  "compare the arms, not the level")
VERDICT_RULES = (
    f"*{NOT_COMPARABLE}*: the quantity has no counterpart at this scale (the reason is in the note).",
    f"*{PENDING}*: an experiment feeding an arm has no finished run with the statistic; the note names the "
    "`make grid` that runs it.",
    f"*{REPRODUCED}*: the min–max bands over runs are apart and the FP16 − BF16 difference of the arms' means has the "
    "paper's sign.",
    f"*{NOT_REPRODUCED}*: the bands are apart and the sign is the opposite (note \"{OPPOSITE_SIGN}\").",
    f"*{NOT_RESOLVED}*: the bands overlap (bands that touch overlap), or an arm has fewer than {MIN_RUNS} runs "
    f"(note \"{ONE_SEED}\": no band); the note gives the difference of the means and the smallest difference bands "
    "this wide could resolve (the mean of the two bands' widths).",
)


@dataclass(frozen=True)
class Statistic:
    """A per-run column of ``tables.summarize`` that a comparison reads, and how the table shows it."""

    label: str
    fmt: str
    ratio: bool = False  # a mismatch: the table also shows BF16/FP16
    validation: bool = False  # read on the experiment's first validation set


# Keyed by the summary column each reads (tables.SUMMARY_COLUMNS).
STATISTICS = {
    "final_reward": Statistic(f"{M.REWARD_Q.label}, final (trailing mean of {TRAIL_WINDOW} steps)", ".3f"),
    "val_peak": Statistic("Validation accuracy, peak (first validation set)", ".3f", validation=True),
    "median_mean_abs_diff": Statistic(f"{M.MEAN_ABS_DIFF_Q.label}, median over steps", ".2e", ratio=True),
    "median_token_kl_k3": Statistic(f"{M.TOKEN_KL_K3_Q.label}, median over steps", ".2e", ratio=True),
}

COMPARISON_COLUMNS = (
    "scale", "panel", "statistic", "compared", "experiments", "paper_fp16", "paper_bf16", "paper_ratio",
    "paper_higher", "reading", "source", "fp16_mean", "fp16_min", "fp16_max", "fp16_n", "bf16_mean", "bf16_min",
    "bf16_max", "bf16_n", "ratio", "verdict", "note", "not_run",
)


# --------------------------------------------------------------------------------------------- the paper's values

def cites_docs(text: str) -> str:
    """Return ``text`` if it cites a section of the project's docs (``docs/<file>.md#<section>``; that the section
    exists is tests/config/test_docs_refs.py's to check, so that loading reads no docs), else raise ValueError."""
    if not docs_refs.references(text):
        raise ValueError("must cite a section of the project's docs as docs/<file>.md#<section>")
    return text


Text = Annotated[Str, Field(min_length=1)]
Value = Annotated[float, Field(ge=0)]


@schema(frozen=True, config=ConfigDict(extra="forbid"))
class PaperComparison:
    """One comparison of a panel as the paper shows it: the statistic, the arm it has higher, its values, the source."""

    statistic: Literal[tuple(STATISTICS)]
    higher: Literal[ARMS]
    reading: Text
    source: Annotated[Text, AfterValidator(cites_docs)]
    fp16: Value | None = None
    bf16: Value | None = None
    not_comparable: dict[Literal[SCALES], Text] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _values_agree(self):
        """Refuse values whose order contradicts ``higher``."""
        if self.fp16 is not None and self.bf16 is not None:
            shown = "fp16" if self.fp16 > self.bf16 else "bf16" if self.bf16 > self.fp16 else None
            if shown != self.higher:
                raise ValueError(f"higher is {self.higher} but the values are fp16 {self.fp16}, bf16 {self.bf16}")
        return self

    @property
    def ratio(self) -> float | None:
        """Return the paper's BF16/FP16 ratio (None without both values)."""
        return self.bf16 / self.fp16 if self.fp16 and self.bf16 is not None else None


PaperValues = dict[str, tuple[PaperComparison, ...]]
_VALUES = TypeAdapter(dict[Text, Annotated[tuple[PaperComparison, ...], Field(min_length=1)]])


def _shown(path: Path) -> str:
    path = Path(path)
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def load_validated(path: Path, adapter: TypeAdapter):
    """Return the YAML document at ``path`` validated by ``adapter``; a missing, unreadable or invalid file raises a
    UserError naming the file and, for an invalid one, the field."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"missing {_shown(path)}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{_shown(path)}: not valid YAML: {str(exc).splitlines()[0]}") from None
    try:
        return adapter.validate_python(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{_shown(path)}: {where}: {err['msg']}") from None


def load_paper_values(path: Path = PAPER_VALUES) -> PaperValues:
    """Return the paper's values per panel from ``path``, validated; a bad file raises a UserError naming the field."""
    return load_validated(path, _VALUES)


def registry_panels(specs: dict[str, ExperimentSpec]) -> set[str]:
    """Return every panel id that an experiment of ``specs`` feeds."""
    return {ref.panel for spec in specs.values() for ref in spec.paper}


def panel_experiments(specs: dict[str, ExperimentSpec], panel: str, arm: str) -> list[str]:
    """Return the experiments whose ``arm`` (a precision, training and inference alike) feeds ``panel``."""
    return [name for name, spec in specs.items()
            if any(a.train == a.infer == arm for a in spec.panel_arms(panel))]


def _figure(panel: str) -> str:
    """Return the figure of a panel id (``fig1a`` → ``fig1``; ``fig3`` → ``fig3``)."""
    match = re.match(r"^(fig\d+)[a-z]?$", panel)
    return match.group(1) if match else panel


def registry_problems(values: PaperValues, specs: dict[str, ExperimentSpec]) -> list[str]:
    """Return where the paper values and the registry ``specs`` disagree (empty when they agree): a value for a
    panel no experiment feeds or that lacks an FP16 or a BF16 arm, or a panel of a REQUIRED_FIGURES figure without
    a value."""
    panels = registry_panels(specs)
    problems = [f"{panel}: has a paper value but no experiment feeds it" for panel in sorted(set(values) - panels)]
    problems += [f"{panel}: no experiment feeds its {arm} arm" for panel in sorted(set(values) & panels)
                 for arm in ARMS if not panel_experiments(specs, panel, arm)]
    problems += [f"{panel}: fed by the registry but has no paper value" for panel in sorted(panels - set(values))
                 if _figure(panel) in REQUIRED_FIGURES]
    return problems


# --------------------------------------------------------------------------------------------- the suite's values

@lru_cache(maxsize=None)
def _registry(scale: str) -> dict[str, ExperimentSpec]:
    return load_all(scale)


@dataclass(frozen=True)
class ArmValues:
    """One arm's statistic over its counted runs, and the experiments feeding it that have none."""

    label: str
    values: tuple[float, ...]
    not_run: tuple[str, ...] = ()  # experiments without a counted run
    no_data: tuple[str, ...] = ()  # experiments whose counted runs lack the statistic

    @property
    def n(self) -> int:
        """Return the number of runs with a value."""
        return len(self.values)

    @property
    def mean(self) -> float:
        """Return the mean over runs (NaN without runs)."""
        return float(np.mean(self.values)) if self.values else np.nan

    @property
    def low(self) -> float:
        """Return the band's lower edge, the smallest run's value (NaN without runs)."""
        return float(min(self.values)) if self.values else np.nan

    @property
    def high(self) -> float:
        """Return the band's upper edge, the largest run's value (NaN without runs)."""
        return float(max(self.values)) if self.values else np.nan

    @property
    def complete(self) -> bool:
        """Return whether every experiment feeding the arm contributed a value."""
        return self.n > 0 and not self.not_run and not self.no_data


def arm_values(summary: pd.DataFrame, scale: str, experiments: list[str], arm: str, statistic: str) -> ArmValues:
    """Return ``statistic`` of the counted runs of ``experiments``' ``arm`` at ``scale`` in ``summary``."""
    values: list[float] = []
    not_run: list[str] = []
    no_data: list[str] = []
    for experiment in experiments:
        rows = summary[(summary["scale"] == scale) & (summary["experiment"] == experiment)
                       & (summary["precision"] == arm) & summary["status"].isin(DRAWN_STATUSES)]
        found = rows[statistic].dropna().astype(float).tolist()
        if rows.empty:
            not_run.append(experiment)
        elif not found:
            no_data.append(experiment)
        values += found
    return ArmValues(arm.upper(), tuple(values), tuple(not_run), tuple(no_data))


def not_comparable_reason(comparison: PaperComparison, scale: str, experiments: list[str]) -> str | None:
    """Return why ``comparison`` has no counterpart at ``scale`` (None when it has): the entry's own reason, or for
    validation accuracy, that the scale's first validation set is not the paper's."""
    if scale in comparison.not_comparable:
        return comparison.not_comparable[scale]
    if not STATISTICS[comparison.statistic].validation:
        return None
    here, paper = _registry(scale), _registry(PAPER)
    for name in experiments:
        ours, theirs = here[name].data.val[:1], paper[name].data.val[:1]
        if ours != theirs:
            return (f"the {scale} validation set ({', '.join(ours) or 'none'}) is not the paper's "
                    f"({', '.join(theirs) or 'none'})")
    return None


def _num(value: float) -> str:
    return f"{value:.3f}" if 1e-2 <= abs(value) < 100 else f"{value:.2g}"


def verdict(fp16: ArmValues, bf16: ArmValues, higher: str) -> tuple[str, str]:
    """Return the verdict and its note for two arms that both have values, the paper showing ``higher`` higher."""
    diff = fp16.mean - bf16.mean
    right_sign = diff > 0 if higher == "fp16" else diff < 0
    single = [a.label for a in (fp16, bf16) if a.n < MIN_RUNS]
    if single:
        return NOT_RESOLVED, f"{ONE_SEED} ({', '.join(single)}): no band"
    if fp16.low > bf16.high or bf16.low > fp16.high:
        return (REPRODUCED, "") if right_sign else (NOT_REPRODUCED, OPPOSITE_SIGN)
    resolvable = ((fp16.high - fp16.low) + (bf16.high - bf16.low)) / 2
    return NOT_RESOLVED, (f"{BANDS_OVERLAP}: FP16 − BF16 = {_num(diff)}; bands this wide resolve a difference "
                          f"above ~{_num(resolvable)}")


def pending_note(arms: list[ArmValues], scale: str) -> str:
    """Return what a pending row lacks: the experiments without a run (with their arms) and the ``make grid`` that
    runs them, and the experiments whose runs logged no value."""
    not_run: dict[str, list[str]] = {}
    for a in arms:
        for name in a.not_run:
            not_run.setdefault(name, []).append(a.label)
    parts = []
    if not_run:
        listed = ", ".join(f"{name} ({', '.join(labels)})" for name, labels in not_run.items())
        parts.append(f"no finished run of {listed}: {grid_command(list(not_run), scale)}")
    parts += [f"the {a.label} runs of {', '.join(a.no_data)} logged no value" for a in arms if a.no_data]
    return "; ".join(parts)


def _experiments_text(per_arm: dict[str, list[str]]) -> str:
    if per_arm["fp16"] == per_arm["bf16"]:
        return ", ".join(per_arm["fp16"])
    return "; ".join(f"{arm.upper()}: {', '.join(names) or 'none'}" for arm, names in per_arm.items())


def compare_row(summary: pd.DataFrame, scale: str, panel: str, comparison: PaperComparison) -> dict:
    """Return the row of one comparison of ``panel`` at ``scale`` (columns COMPARISON_COLUMNS)."""
    specs = _registry(scale)
    per_arm = {arm: panel_experiments(specs, panel, arm) for arm in ARMS}
    fp16, bf16 = (arm_values(summary, scale, per_arm[arm], arm, comparison.statistic) for arm in ARMS)
    reason = not_comparable_reason(comparison, scale, per_arm["fp16"] + per_arm["bf16"])
    if reason:
        outcome, note = NOT_COMPARABLE, reason
    elif not (fp16.complete and bf16.complete):
        outcome, note = PENDING, pending_note([fp16, bf16], scale)
    else:
        outcome, note = verdict(fp16, bf16, comparison.higher)
    if any(specs[name].reward_assumed for name in per_arm["fp16"] + per_arm["bf16"]):
        note = "; ".join(filter(None, [note, ASSUMED_REWARD]))
    stat = STATISTICS[comparison.statistic]
    ratio = bf16.mean / fp16.mean if stat.ratio and fp16.n and bf16.n and fp16.mean > 0 else np.nan
    row = {
        "scale": scale, "panel": panel, "statistic": comparison.statistic, "compared": stat.label,
        "experiments": _experiments_text(per_arm), "paper_fp16": comparison.fp16, "paper_bf16": comparison.bf16,
        "paper_ratio": comparison.ratio if stat.ratio else None, "paper_higher": comparison.higher,
        "reading": comparison.reading, "source": comparison.source, "ratio": ratio, "verdict": outcome, "note": note,
        "not_run": " ".join(sorted(set(fp16.not_run + bf16.not_run))),
    }
    for arm in (fp16, bf16):
        key = arm.label.lower()
        row.update({f"{key}_mean": arm.mean, f"{key}_min": arm.low, f"{key}_max": arm.high, f"{key}_n": arm.n})
    return row


def compare_summary(summary: pd.DataFrame, values: PaperValues | None = None,
                    scales: tuple[str, ...] = SCALES) -> pd.DataFrame:
    """Return the comparison (columns COMPARISON_COLUMNS): one row per scale, panel and comparison of ``values``
    (default: docs/paper_values.yaml), from ``summary``, the table of ``tables.summarize``."""
    values = load_paper_values() if values is None else values
    rows = [compare_row(summary, scale, panel, comparison)
            for scale in scales for panel, comparisons in values.items() for comparison in comparisons]
    return pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))


def compare(table: RunTable, values: PaperValues | None = None, scales: tuple[str, ...] = SCALES) -> pd.DataFrame:
    """Return the comparison of the runs of ``table`` with the paper's ``values`` (see ``compare_summary``)."""
    return compare_summary(summarize(table), values, scales)


# --------------------------------------------------------------------------------------------- output

def _number(value: float | None, fmt: str) -> str:
    return "" if value is None or pd.isna(value) else format(value, fmt)


def arm_cell(row: pd.Series, arm: str, fmt: str) -> str:
    """Return an arm's cell: ``mean [min–max] n=N``, ``value n=1`` for one run, ``no runs`` without runs."""
    n = int(row[f"{arm}_n"])
    if n == 0:
        return "no runs"
    mean = _number(row[f"{arm}_mean"], fmt)
    if n == 1:
        return f"{mean} n=1"
    return f"{mean} [{_number(row[f'{arm}_min'], fmt)}–{_number(row[f'{arm}_max'], fmt)}] n={n}"


def _paper_cell(row: pd.Series) -> str:
    parts = [f"{arm.upper()} {paper_number(row[f'paper_{arm}'])}" for arm in ARMS if not pd.isna(row[f"paper_{arm}"])]
    text = ", ".join(parts) or f"{row['paper_higher'].upper()} higher"
    if not pd.isna(row["paper_ratio"]):
        text += f" (BF16/FP16 {_times(row['paper_ratio'])})"
    return text


def paper_number(value: float) -> str:
    """Return a value read off the paper as written in docs: rewards and accuracies with two decimals (three where
    read so), values below 0.01 as mantissa and exponent (``7e-4``), zero as ``0``."""
    if value == 0:
        return "0"
    if value >= 0.01:
        return f"{value:.2f}" if round(value, 2) == value else f"{value:g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _times(ratio: float) -> str:
    return f"{ratio:.1f}×" if ratio < 10 else f"{ratio:.0f}×"


def _source_cell(source: str) -> str:
    return re.sub(r"docs/([\w./-]+\.md#[\w-]+)", r"[docs/\1](../docs/\1)", source)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


MARKDOWN_HEADERS = ("panel", "compared", "paper", "read off the paper", "FP16", "BF16", "BF16/FP16", "verdict",
                    "note")


def _scale_section(group: pd.DataFrame, scale: str) -> str:
    """Return one scale's table, or where every row is pending, one sentence naming the ``make grid`` to run."""
    if (group["verdict"] == PENDING).all():
        experiments = sorted({name for names in group["not_run"] for name in names.split()})
        return (f"No finished run feeds a compared panel at this scale yet ({len(group)} rows pending): "
                f"`{grid_command(experiments, scale)}`. The paper's values are in the other scales' tables and "
                f"in `{COMPARISON_CSV}`.")
    rows = []
    for _, row in group.iterrows():
        fmt = STATISTICS[row["statistic"]].fmt
        rows.append([
            row["panel"], _md(f"{row['compared']}: {row['experiments']}"), _md(_paper_cell(row)),
            f"{_md(row['reading'])} {_source_cell(row['source'])}", arm_cell(row, "fp16", fmt),
            arm_cell(row, "bf16", fmt), "" if pd.isna(row["ratio"]) else _times(row["ratio"]), row["verdict"],
            _md(row["note"]),
        ])
    return render_table(rows, MARKDOWN_HEADERS, markdown=True, floatfmt="")


def to_markdown(comparison: pd.DataFrame) -> str:
    """Return the comparison as a Markdown document: one table per scale, the verdict rules and definitions below."""
    parts = ["# Side by side with the paper", "",
             "Written by `make tables` from the local runs (the committed copy: `make published-results`, from "
             "results/logs); the paper's values and where each was read: "
             "[docs/paper_values.yaml](../docs/paper_values.yaml).", ""]
    for scale, group in comparison.groupby("scale", sort=False):
        parts += [f"## {scale} scale", "", _scale_section(group, str(scale)), ""]
    parts += ["Verdicts:", ""] + [f"- {rule}" for rule in VERDICT_RULES] + [""]
    parts += [
        "Definitions: FP16 and BF16 are the runs of the experiments whose arm of that precision feeds the panel "
        "(the experiment files' `paper:` lists), finished runs and wandb exports only; each shows the mean over "
        "runs, the min–max band and n, the number of runs (seeds; for a panel fed by several experiments, all their "
        "runs). The statistics are `make tables`' per-run columns (`summary.md`, written beside this file): final "
        f"training reward = the trailing mean over {TRAIL_WINDOW} logged steps of `{M.REWARD}` at the last step; "
        "peak validation accuracy = the highest `val-core/<first validation set>/acc/mean@n`; mismatch = the median "
        "over steps of "
        f"`{M.PROBS_DIFF_ABS_MEAN}` or `{M.TOKEN_KL_K3}` (k3; the paper's oat row plots k1), BF16/FP16 the ratio of "
        "the arms' means. The paper's values are read off its figures by eye (±0.01 on rewards and accuracies); "
        "the paper's runs end at different steps per arm where BF16 stopped early.",
        "",
    ]
    return "\n".join(parts)


def write_comparison(comparison: pd.DataFrame, out_dir: Path) -> tuple[Path, Path]:
    """Write ``paper_comparison.csv`` and ``paper_comparison.md`` into ``out_dir`` atomically; return both paths."""
    return write_csv_and_markdown(comparison, to_markdown(comparison), Path(out_dir) / COMPARISON_CSV,
                                  Path(out_dir) / COMPARISON_MD)
