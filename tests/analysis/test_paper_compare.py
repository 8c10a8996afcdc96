"""The table beside the paper: the paper's values agree with the registry and their docs, and every verdict branch."""

import re

import pandas as pd
import pytest
import yaml

from precision_rl import metrics as M
from precision_rl.analysis import logs
from precision_rl.analysis import paper_compare as pc
from precision_rl.analysis.synthetic import write_run
from precision_rl.analysis.tables import SUMMARY_COLUMNS, summarize
from precision_rl.config import docs_refs
from precision_rl.config.registry import load_all
from precision_rl.config.scale import SCALES
from precision_rl.errors import UserError

STEPS = 10


def records(reward, extra=None):
    """Return STEPS records of a constant reward (its trailing mean is the reward) and the ``extra`` metrics."""
    return [{"step": s, "data": {M.REWARD: reward, **(extra or {})}} for s in range(1, STEPS + 1)]


# (experiment, precision, seed, final reward, mean |π − μ|)
PLANTED = [
    ("sanity/grpo", "fp16", 1, 0.95, 7e-4), ("sanity/grpo", "fp16", 2, 0.97, 7e-4),  # fig1a: apart
    ("sanity/grpo", "bf16", 1, 0.60, 4e-3), ("sanity/grpo", "bf16", 2, 0.65, 5e-3),
    ("sanity/grpo_seq_mis", "fp16", 1, 0.90, 7e-4), ("sanity/grpo_seq_mis", "bf16", 1, 0.85, 3e-3),  # fig1c: 1 seed
    ("sanity/pg_seq_is", "fp16", 1, 0.90, 6e-4), ("sanity/pg_seq_is", "fp16", 2, 0.80, 8e-4),  # fig1e: overlap
    ("sanity/pg_seq_is", "bf16", 1, 0.85, 4e-3), ("sanity/pg_seq_is", "bf16", 2, 0.70, 4e-3),
    ("sanity/pg_seq_mis", "fp16", 1, 0.60, 7e-4), ("sanity/pg_seq_mis", "bf16", 1, 0.90, 4e-3),  # fig1f: opposite
    ("sanity/pg_seq_mis", "fp16", 2, 0.62, 7e-4), ("sanity/pg_seq_mis", "bf16", 2, 0.92, 4e-3),
    ("sanity/grpo_token_tis", "bf16", 1, 0.80, 4e-3),  # fig1b: FP16 not run
    ("sanity/gspo", "bf16", 1, 0.80, 4e-3),  # fig1d: FP16 not run
]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for experiment, precision, seed, reward, diff in PLANTED:
        write_run(root, "tiny", experiment, precision, seed, [records(reward, {M.PROBS_DIFF_ABS_MEAN: diff})])
    write_run(root, "tiny", "sanity/gspo", "fp16", 1, [records(0.99)], status="died")
    return logs.load_runs([root], progress=False)


@pytest.fixture(scope="module")
def comparison(table):
    return pc.compare(table)


def row(comparison, panel, scale="tiny", statistic=None):
    rows = comparison[(comparison["panel"] == panel) & (comparison["scale"] == scale)]
    if statistic:
        rows = rows[rows["statistic"] == statistic]
    assert len(rows) == 1, rows
    return rows.iloc[0]


# --------------------------------------------------------------------------------------------- the paper's values

def test_paper_values_agree_with_the_registry_at_every_scale():
    values = pc.load_paper_values()
    for scale in SCALES:
        assert pc.registry_problems(values, load_all(scale)) == []
    figures = {pc._figure(panel) for panel in values}
    assert {"fig1", "fig2", "fig3"} <= figures
    assert sum(panel.startswith("fig1") for panel in values) == 12


def test_registry_problems_name_a_stray_panel_a_missing_one_and_a_one_sided_one():
    values = dict(pc.load_paper_values())
    values["fig1z"] = values["fig1a"]
    values["fig4"] = values["fig1a"]
    del values["fig2c"]
    problems = pc.registry_problems(values, load_all("tiny"))
    assert "fig1z: has a paper value but no experiment feeds it" in problems
    assert "fig2c: fed by the registry but has no paper value" in problems
    assert "fig4: no experiment feeds its bf16 arm" in problems
    assert len(problems) == 3


def _section(name: str, anchor: str) -> str:
    """Return the text under the heading of docs/<name> whose anchor is ``anchor``, whitespace collapsed."""
    lines = (docs_refs.DOCS_DIR / name).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and
                 docs_refs.anchor(line.lstrip("#")) == anchor)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return " ".join(" ".join(lines[start:end]).split())


def test_every_paper_value_is_written_in_the_section_it_cites():
    checked = 0
    for panel, comparisons in pc.load_paper_values().items():
        letter = re.fullmatch(r"fig\d([a-z])", panel)
        for comparison in comparisons:
            (name, anchor), = docs_refs.references(comparison.source)
            text = _section(name, anchor)
            fp16, bf16 = (pc.paper_number(v) for v in (comparison.fp16, comparison.bf16))
            if letter:
                assert f"({letter.group(1)}) FP16 {fp16}, BF16 {bf16}" in text, (panel, text)
            else:
                for value in (comparison.fp16, comparison.bf16):
                    assert pc.paper_number(value) in text or f"{value:g}" in text, (panel, value)
            checked += 1
    assert checked == 26


def _values_file(tmp_path, **changes):
    entry = {"statistic": "final_reward", "higher": "fp16", "fp16": 0.98, "bf16": 0.60, "reading": "read",
             "source": "docs/figures.md#fig-1-training-reward", **changes}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"fig1a": [entry]}))
    return path


def test_a_good_entry_loads():
    entry = pc.load_paper_values()["fig1a"][0]
    assert (entry.statistic, entry.higher, entry.fp16, entry.bf16) == ("final_reward", "fp16", 0.98, 0.60)


@pytest.mark.parametrize(("changes", "message"), [
    ({"higher": "bf16"}, "higher is bf16 but the values are fp16 0.98, bf16 0.6"),
    ({"source": "read off the figure"}, "must cite a section"),
    ({"statistic": "best_reward"}, "fig1a.0.statistic"),
    ({"not_comparable": {"huge": "why"}}, "fig1a.0.not_comparable"),
    ({"seeds": 3}, "fig1a.0.seeds"),
])
def test_a_bad_entry_is_refused_naming_its_field(tmp_path, changes, message):
    with pytest.raises(UserError, match=re.escape(message)):
        pc.load_paper_values(_values_file(tmp_path, **changes))


def test_every_statistic_is_a_column_of_the_results_table():
    assert set(pc.STATISTICS) <= set(SUMMARY_COLUMNS)


# --------------------------------------------------------------------------------------------- verdicts

def test_reproduced_when_the_sign_agrees_and_the_bands_are_apart(comparison):
    fig1a = row(comparison, "fig1a")
    assert fig1a["verdict"] == pc.REPRODUCED and fig1a["note"] == ""
    assert (fig1a["fp16_n"], fig1a["fp16_min"], fig1a["fp16_max"]) == (2, 0.95, 0.97)
    assert fig1a["fp16_mean"] == pytest.approx(0.96) and fig1a["bf16_mean"] == pytest.approx(0.625)
    assert (fig1a["paper_fp16"], fig1a["paper_bf16"]) == (0.98, 0.60)
    assert fig1a["source"] == "docs/figures.md#fig-1-training-reward"


def test_one_seed_per_arm_resolves_nothing_and_says_so(comparison):
    fig1c = row(comparison, "fig1c")
    assert fig1c["verdict"] == pc.NOT_RESOLVED and fig1c["note"] == f"{pc.ONE_SEED} (FP16, BF16): no band"
    assert fig1c["fp16_n"] == fig1c["bf16_n"] == 1 and fig1c["fp16_min"] == fig1c["fp16_max"] == 0.90


def test_overlapping_bands_resolve_no_difference_and_say_what_they_could_resolve(comparison):
    fig1e = row(comparison, "fig1e")
    assert fig1e["fp16_mean"] > fig1e["bf16_mean"]
    assert fig1e["verdict"] == pc.NOT_RESOLVED and fig1e["note"].startswith(f"{pc.BANDS_OVERLAP}: FP16 − BF16 = ")
    assert "resolve a difference above ~" in fig1e["note"]


def test_the_opposite_sign_with_bands_apart_is_not_reproduced(comparison):
    fig1f = row(comparison, "fig1f")
    assert fig1f["verdict"] == pc.NOT_REPRODUCED and fig1f["note"] == pc.OPPOSITE_SIGN


def test_an_arm_without_a_finished_run_is_pending_with_the_grid_that_runs_it(comparison):
    fig1d = row(comparison, "fig1d")  # its fp16 run died
    assert fig1d["verdict"] == pc.PENDING and fig1d["fp16_n"] == 0 and fig1d["bf16_n"] == 1
    assert "no finished run of sanity/gspo (FP16)" in fig1d["note"]
    assert "make grid EXP='sanity/gspo'" in fig1d["note"]
    fig1l = row(comparison, "fig1l")
    assert fig1l["note"].startswith("no finished run of dense14b/dapo (FP16, BF16): make grid EXP='dense14b/dapo'")
    assert fig1l["not_run"] == "dense14b/dapo"


def test_every_row_has_one_of_the_verdicts(comparison):
    assert set(comparison["verdict"]) == set(pc.VERDICTS)


def test_every_paper_scale_row_is_pending_at_paper_scale(comparison):
    paper = comparison[comparison["scale"] == "paper"]
    assert len(paper) == len(comparison) / 2 and set(paper["verdict"]) == {pc.PENDING}
    assert "SCALE=paper" in row(comparison, "fig1a", "paper")["note"]


def test_not_comparable_gives_the_entry_reason_or_the_validation_set(comparison):
    fig1i = row(comparison, "fig1i")
    assert fig1i["verdict"] == pc.NOT_COMPARABLE and "mixture of experts" in fig1i["note"]
    fig2a = row(comparison, "fig2a")
    assert fig2a["verdict"] == pc.NOT_COMPARABLE
    assert fig2a["note"] == "the tiny validation set (tiny_sanity_val) is not the paper's (aime24)"
    assert row(comparison, "fig2a", "paper")["verdict"] == pc.PENDING


def test_a_mismatch_panel_pools_its_arms_and_gives_the_ratio(comparison):
    fig3 = row(comparison, "fig3", statistic="median_mean_abs_diff")
    assert fig3["experiments"] == ("FP16: sanity/pg_seq_is; BF16: sanity/grpo, sanity/grpo_seq_mis, "
                                   "sanity/grpo_token_tis, sanity/gspo")
    assert (fig3["fp16_n"], fig3["bf16_n"]) == (2, 5)
    assert fig3["verdict"] == pc.REPRODUCED
    assert fig3["ratio"] == pytest.approx((20e-3 / 5) / 7e-4)
    assert fig3["paper_ratio"] == pytest.approx(0.004 / 0.0007)
    kl = row(comparison, "fig3", statistic="median_token_kl_k3")
    assert kl["verdict"] == pc.PENDING and "logged no value" in kl["note"]


def test_a_pooled_arm_missing_one_experiment_is_pending(table):
    summary = summarize(table)
    partial = pc.compare_summary(summary[summary["experiment"] != "sanity/gspo"], scales=("tiny",))
    fig3 = row(partial, "fig3", statistic="median_mean_abs_diff")
    assert fig3["bf16_n"] == 4 and fig3["verdict"] == pc.PENDING
    assert fig3["note"].startswith("no finished run of sanity/gspo (BF16): make grid EXP='sanity/gspo'")


def test_verdict_edges():
    def arm(label, *values):
        return pc.ArmValues(label, values)

    assert pc.verdict(arm("FP16", 0.9, 0.8), arm("BF16", 0.8, 0.7), "fp16") == (  # bands that touch overlap
        pc.NOT_RESOLVED, f"{pc.BANDS_OVERLAP}: FP16 − BF16 = 0.100; bands this wide resolve a difference above ~0.100")
    assert pc.verdict(arm("FP16", 0.5), arm("BF16", 0.5), "fp16") == (pc.NOT_RESOLVED, "1 seed (FP16, BF16): no band")
    assert pc.verdict(arm("FP16", 0.1, 0.2), arm("BF16", 0.9), "bf16") == (pc.NOT_RESOLVED, "1 seed (BF16): no band")
    assert pc.verdict(arm("FP16", 0.1, 0.2), arm("BF16", 0.9, 0.8), "bf16") == (pc.REPRODUCED, "")
    assert pc.verdict(arm("FP16", 0.1, 0.2), arm("BF16", 0.9, 0.8), "fp16") == (pc.NOT_REPRODUCED, pc.OPPOSITE_SIGN)
    assert pc.verdict(arm("FP16", 1e-5, 2e-5), arm("BF16", 1e-5, 4e-5), "bf16")[1].endswith("above ~2e-05")
    assert not pc.ArmValues("BF16", (0.5,), not_run=("sanity/gspo",)).complete


# --------------------------------------------------------------------------------------------- output

def test_written_files(comparison, tmp_path):
    csv_path, md_path = pc.write_comparison(comparison, tmp_path)
    written = pd.read_csv(csv_path)
    assert list(written.columns) == list(pc.COMPARISON_COLUMNS) and len(written) == len(comparison)
    text = md_path.read_text()
    assert "## tiny scale" in text and "## paper scale" in text
    assert "No finished run feeds a compared panel at this scale yet" in text  # paper scale: all pending
    assert "0.960 [0.950–0.970] n=2" in text and "0.900 n=1" in text and "no runs" in text
    assert "Mean \\|π − μ\\|" in text and "(BF16/FP16 5.7×)" in text
    assert "[docs/figures.md#fig-1-training-reward](../docs/figures.md#fig-1-training-reward)" in text
    assert all(rule in text for rule in pc.VERDICT_RULES)
    assert not docs_refs.unresolved(text)
