"""Table 2 beside the paper: its values agree with the registry and their docs, and the suite's accuracies per set."""

import re

import pytest
import yaml

from precision_rl.analysis import inference_table as it
from precision_rl.analysis import logs
from precision_rl.analysis.paper_compare import NOT_COMPARABLE, PENDING
from precision_rl.analysis.synthetic import write_run
from precision_rl.config import docs_refs
from precision_rl.config.registry import load_all
from precision_rl.errors import UserError

EIGHT_K, THIRTY_TWO_K = "eval/inference_precision_8k", "eval/inference_precision_32k"


def test_the_paper_values_agree_with_the_registry():
    table2 = it.load_table2()
    specs = load_all("paper")
    assert it.registry_problems(table2, specs) == []
    assert sorted(it.table2_experiments(specs)) == sorted([EIGHT_K, THIRTY_TWO_K])


def test_every_paper_value_is_written_in_the_section_it_cites():
    table2 = it.load_table2()
    (name, anchor), = docs_refs.references(table2.source)
    lines = (docs_refs.DOCS_DIR / name).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and docs_refs.anchor(line.lstrip("#")) == anchor)
    text = " ".join(lines[start:start + 6])
    names = {"amc": "AMC23", "aime24": "AIME24"}
    budgets = {EIGHT_K: "8K", THIRTY_TWO_K: "32K"}
    for experiment, per_set in table2.accuracy.items():
        for val_set, paper in per_set.items():
            assert re.search(rf"{names[val_set]}.*?{budgets[experiment]} {paper.bf16:.2f} / {paper.fp16:.2f}", text), \
                (experiment, val_set)


def test_registry_problems_name_each_disagreement():
    table2 = it.load_table2()
    accuracy = {name: dict(sets) for name, sets in table2.accuracy.items()}
    accuracy["sanity/grpo"] = accuracy.pop(THIRTY_TWO_K)
    accuracy[EIGHT_K]["math500"] = accuracy[EIGHT_K].pop("aime24")
    bad = it.PaperTable2(source=table2.source, reading=table2.reading, accuracy=accuracy)
    assert it.registry_problems(bad, load_all("paper")) == [
        f"sanity/grpo: has Table 2 values but does not feed {it.TABLE2_PANEL}",
        f"{THIRTY_TWO_K}: feeds {it.TABLE2_PANEL} but has no Table 2 values",
        f"{EIGHT_K}: a Table 2 value for math500, which it does not validate on",
        f"{EIGHT_K}: validates on aime24 without a Table 2 value",
    ]


@pytest.mark.parametrize(("change", "message"), [
    (lambda doc: doc["accuracy"][EIGHT_K]["amc"].pop("bf16"), "accuracy.eval/inference_precision_8k.amc.bf16"),
    (lambda doc: doc["accuracy"][EIGHT_K]["amc"].update(fp16=150.0), "less than or equal to 100"),
    (lambda doc: doc.update(source="Table 2 of the paper"), "must cite a section"),
])
def test_a_bad_file_is_refused_naming_its_field(tmp_path, change, message):
    doc = yaml.safe_load(it.PAPER_TABLE2.read_text())
    change(doc)
    path = tmp_path / "table2.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match=re.escape(message)):
        it.load_table2(path)


def _val_records(metric, accuracy):
    return [{"step": 0, "data": {metric: accuracy}}]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for precision, seed, amc, aime in (("fp16", 1, 0.50, 0.20), ("fp16", 2, 0.52, 0.22), ("bf16", 1, 0.49, 0.25)):
        records = [{"step": 0, "data": {"val-core/amc/acc/mean@32": amc, "val-core/aime24/acc/mean@32": aime}}]
        write_run(root, "paper", EIGHT_K, precision, seed, [records])
    write_run(root, "tiny", EIGHT_K, "fp16", 42, [_val_records("val-core/tiny_sanity_val/acc/mean@4", 0.47)])
    write_run(root, "paper", THIRTY_TWO_K, "fp16", 1, [_val_records("val-core/amc/acc/mean@32", 0.9)],
              status="died")
    return it.inference_table(logs.load_runs([root], progress=False))


def row(rows, scale, experiment, val_set):
    found = rows[(rows["scale"] == scale) & (rows["experiment"] == experiment) & (rows["val_set"] == val_set)]
    assert len(found) == 1, found
    return found.iloc[0]


def test_each_arm_pools_its_runs_per_set_in_percent(rows):
    aime = row(rows, "paper", EIGHT_K, "aime24")
    assert (aime["fp16_mean"], aime["fp16_min"], aime["fp16_max"], aime["fp16_n"]) == pytest.approx((21.0, 20.0, 22.0, 2))
    assert (aime["bf16_mean"], aime["bf16_n"]) == pytest.approx((25.0, 1))
    assert aime["diff"] == pytest.approx(-4.0) and aime["paper_diff"] == pytest.approx(20.10 - 22.60)
    assert aime["note"] == ""
    assert row(rows, "paper", EIGHT_K, "amc")["fp16_mean"] == pytest.approx(51.0)


def test_a_run_that_did_not_finish_is_not_counted_and_the_row_says_what_to_run(rows):
    amc = row(rows, "paper", THIRTY_TWO_K, "amc")
    assert amc["fp16_n"] == 0 and amc["note"].startswith(PENDING)
    assert "make grid EXP='eval/inference_precision_32k' SCALE=paper" in amc["note"]


def test_a_scale_with_its_own_sets_has_no_paper_value(rows):
    tiny = row(rows, "tiny", EIGHT_K, "tiny_sanity_val")
    assert tiny["fp16_mean"] == pytest.approx(47.0) and tiny["paper_fp16"] != tiny["paper_fp16"]  # NaN
    assert tiny["note"] == f"{NOT_COMPARABLE}: tiny_sanity_val is not one of the paper's sets (amc, aime24)"
    assert set(rows[rows["scale"] == "tiny"]["val_set"]) == {"tiny_sanity_val"}


def test_the_markdown_and_the_files(rows, tmp_path):
    csv_path, md_path = it.write_inference_table(rows, tmp_path)
    assert (csv_path.name, md_path.name) == (it.INFERENCE_CSV, it.INFERENCE_MD)
    text = md_path.read_text()
    line = next(line for line in text.splitlines() if line.startswith(f"| {EIGHT_K} ") and "| aime24 " in line)
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[:8] == [EIGHT_K, "aime24", "20.10", "22.60", "-2.50", "21.00 [20.00–22.00] n=2", "25.00 n=1",
                         "-4.00"]
    assert "## paper scale" in text and "## tiny scale" in text
