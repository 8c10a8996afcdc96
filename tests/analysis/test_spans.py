"""Statistics over a range of steps (`precision_rl span`): a run trained in two attempts, summarized over the
second one's steps only."""

import numpy as np
import pandas as pd
import pytest

from precision_rl import metrics as M
from precision_rl.analysis import logs, spans
from precision_rl.analysis.tables import first_val_set
from precision_rl.cli import main
from precision_rl.errors import UserError

VAL_SET = first_val_set("sanity/grpo", "tiny", frozenset())


def reward(step: int) -> float:
    return min(0.99, 0.8 + 0.02 * step)  # the trailing mean of 5 (steps 6-10) first reaches 0.95 at step 10


def record(step: int, step_time: float) -> dict:
    data = {M.REWARD: reward(step), M.STEP_TIME: step_time, M.TIMING_PREFIX + "gen": step_time / 2,
            M.PROBS_DIFF_ABS_MEAN: 1e-4 * step, M.TOKEN_KL_K3: 1e-6 * step}
    if step % 5 == 0:
        data[M.val_metric({f"{M.VAL_CORE_PREFIX}{VAL_SET}/acc/mean@4"}, VAL_SET)] = step / 100
    return {"step": step, "data": data}


@pytest.fixture
def root(tmp_path):
    from precision_rl.analysis.synthetic import write_run

    root = tmp_path / "runs"
    first = [record(s, 10.0) for s in range(1, 11)]
    second = [record(s, 20.0 + s) for s in range(11, 21)]
    write_run(root, "tiny", "sanity/grpo", "bf16", 42, [first, second])
    return root


def column(root, text):
    table = logs.load_runs([root], progress=False)
    return dict(zip(spans.span_labels(), spans.span_column(
        spans.SeriesIndex(table.metrics), "tiny", "sanity.grpo-bf16-s42", "sanity/grpo", spans.parse_range(text)),
        strict=True))


def test_span_reads_only_its_steps_across_attempts(root):
    got = column(root, "11-18")
    per_step = [reward(s) for s in range(11, 19)]
    trailing = [np.mean([reward(k) for k in range(s - 4, s + 1)]) for s in range(11, 19)]
    assert got["steps logged"] == "11-18 (8 steps)"
    assert got["Training reward per step: mean (sd)"] == f"{np.mean(per_step):.3f} (sd {np.std(per_step, ddof=1):.3f})"
    assert got["trailing mean of 5 steps: lowest - highest"] == f"{min(trailing):.3f} - {max(trailing):.3f}"
    assert got["trailing mean at the range's last step"] == f"{trailing[-1]:.3f}"
    assert got["first step of the run with the trailing mean >= 0.95"] == "10"
    assert got["validation score (last in range)"] == "0.150 (step 15)"
    assert got["Step time (s): median"] == format(np.median([20.0 + s for s in range(11, 19)]), ".4g")
    assert got["gen (s): median"] == format(np.median([(20.0 + s) / 2 for s in range(11, 19)]), ".4g")
    assert got["Mean |π − μ|: median"] == format(1e-4 * 14.5, ".4g")
    assert got["update_actor (s): median"] == "n/a"


def test_span_says_what_it_did_not_find(root):
    early = column(root, "1-9")
    assert early["first step of the run with the trailing mean >= 0.95"] == "not by step 9"
    beyond = column(root, "30-40")
    assert beyond["steps logged"] == "none"
    assert beyond["Step time (s): median"] == "n/a"


@pytest.mark.parametrize("text", ["12", "a-b", "0-5", "9-3", "-4", "5-"])
def test_bad_step_ranges_are_one_clear_error(text):
    with pytest.raises(UserError, match="bad step range"):
        spans.parse_range(text)


def test_span_command_prints_one_column_per_run(root, capsys):
    assert main(["span", "sanity/grpo", "--runs", str(root), "--steps", "11-20"]) == 0
    out = capsys.readouterr().out
    assert "sanity.grpo-bf16-s42 (tiny)" in out and "11-20 (10 steps)" in out
    assert main(["span", "--runs", str(root), "--steps", "20-11"]) == 2
    assert main(["span", "sanity/gspo", "--runs", str(root), "--steps", "1-20"]) == 2


def test_paired_rows_read_each_run_against_the_first_over_common_steps():
    reference = pd.Series([0.5, 0.6, 0.7, 0.8], index=[1, 2, 3, 4])
    other = pd.Series([0.6, 0.65, 0.9, 0.85, 0.99], index=[2, 3, 4, 5, 6])
    steps, correlation, difference = spans.paired_column(reference, other)
    diffs = np.array([0.0, -0.05, 0.1])
    assert steps == "3"
    assert correlation == f"{np.corrcoef([0.6, 0.7, 0.8], [0.6, 0.65, 0.9])[0, 1]:.3f}"
    assert difference == f"{diffs.mean():+.4f} (sd {diffs.std(ddof=1):.4f})"
    assert spans.paired_column(reference, pd.Series([0.1], index=[4])) == ["1", "n/a", "n/a"]
    assert spans.paired_column(reference, pd.Series(0.9, index=[1, 2, 3]))[1] == "n/a"


def test_span_table_of_two_runs_pairs_the_second_with_the_first(root):
    from precision_rl.analysis.synthetic import write_run

    shifted = [{"step": r["step"], "data": {**r["data"], M.REWARD: r["data"][M.REWARD] - 0.01}}
               for r in (record(s, 10.0) for s in range(1, 21))]
    write_run(root, "tiny", "sanity/grpo", "fp16", 42, [shifted])
    text = spans.span_table(logs.load_runs([root], progress=False), spans.parse_range("1-20"))
    lines = {line.split("  ")[0]: line for line in text.splitlines()}
    assert "(the first column)" in lines[spans.PAIRED_LABELS[0]]
    assert lines[spans.PAIRED_LABELS[0]].split()[-1] == "20"
    assert lines[spans.PAIRED_LABELS[1]].split()[-1] == "1.000"
    assert lines[spans.PAIRED_LABELS[2]].endswith("(sd 0.0000)")
    single = spans.span_table(logs.load_runs([root / "tiny" / "sanity" / "grpo" / "fp16"], progress=False),
                              spans.parse_range("1-20"))
    assert spans.PAIRED_LABELS[0] not in single


def test_a_metric_asked_for_by_name_is_averaged_over_the_range_only(root, capsys):
    from precision_rl.analysis.synthetic import write_run

    records = [{"step": s, "data": {M.REWARD: reward(s), "actor/grad_norm": float(s)}} for s in range(1, 21)]
    write_run(root, "tiny", "sanity/grpo", "fp16", 42, [records])
    text = spans.span_table(logs.load_runs([root / "tiny" / "sanity" / "grpo" / "fp16"], progress=False),
                            spans.parse_range("3-6"), ("actor/grad_norm",))
    row = next(line for line in text.splitlines() if line.startswith(spans.metric_label("actor/grad_norm")))
    assert row.split()[-2:] == ["4.5", "(4.5)"]
    assert main(["span", "sanity/grpo", "--runs", str(root), "--steps", "1-20", "--metric", "actor/grad_norm"]) == 0
    assert capsys.readouterr().out.count("actor/grad_norm: mean (median)") == 1
    assert main(["span", "sanity/grpo", "--runs", str(root), "--steps", "1-20", "--metric", "actor/grad"]) == 2
    assert "no chosen run logged actor/grad; logged names that look alike: actor/grad_norm" in capsys.readouterr().err
