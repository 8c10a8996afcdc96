"""The log loader: run directories and wandb CSVs → the tidy long table (fixtures written here)."""

import json
import math
import warnings

import numpy as np
import pytest

from precision_rl import metrics as M
from precision_rl.analysis import logs, wandb_csv
from precision_rl.analysis.synthetic import write_run
from precision_rl.errors import UserError

pytestmark = pytest.mark.filterwarnings("ignore::precision_rl.analysis.logs.LogWarning")

VAL = "val-core/tiny_sanity_val/acc/mean@4"


def rec(step, **data):
    """One verl file-logger record; keyword names spell metric names with __ for / (critic__score__mean)."""
    return {"step": step, "data": {(VAL if k == "val" else k.replace("__", "/")): v for k, v in data.items()}}


def values(table, run, metric):
    rows = table.metrics[(table.metrics["run"] == run) & (table.metrics["metric"] == metric)]
    return dict(zip(rows["step"].tolist(), rows["value"].tolist(), strict=True))


@pytest.fixture
def runs_root(tmp_path):
    root = tmp_path / "runs"
    # A resumed fp16 run: attempt 0 logs steps 0-3 (step 0 = validation only) and dies; attempt 1 restarts from the
    # step-2 checkpoint: validates at step 2 (val only), then re-logs steps 3-4. NaN grad norm at step 3 (skip).
    write_run(root, "tiny", "sanity/grpo", "fp16", 1, [
        [rec(0, val=0.25),
         rec(1, critic__score__mean=0.5, actor__grad_norm=1.0),
         rec(2, critic__score__mean=0.6, actor__grad_norm=1.1),
         rec(3, critic__score__mean=0.1, actor__grad_norm=1.2)],
        [rec(2, val=0.5),
         rec(3, critic__score__mean=0.7, actor__grad_norm=float("nan")),
         rec(4, critic__score__mean=0.8, actor__grad_norm=1.3, custom__thing=3.0)],
    ], stamp="20260101T000000Z")
    # A bf16 run whose last line was cut mid-write.
    write_run(root, "tiny", "sanity/grpo", "bf16", 1, [
        '{"step": 1, "data": {"critic/score/mean": 0.4}}\n{"step": 2, "data": {"critic/score/mean": 0.3}}\n'
        '{"step": 3, "data": {"critic/sco'], algorithm="grpo")
    return root


def test_table_has_the_right_rows(runs_root):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = logs.load_runs([runs_root], progress=False)
    messages = [str(w.message) for w in caught]
    assert any("truncated" in m and "line 3" in m for m in messages)
    assert sum("outside the known families" in m for m in messages) == 1
    assert any("custom/thing" in m for m in messages)

    assert list(table.metrics.columns) == list(logs.COLUMNS)
    fp16 = "sanity.grpo-fp16-s1"
    # later attempt wins per (step, metric): step 3 reward is 0.7 (not 0.1); step 2 keeps its training reward
    assert values(table, fp16, M.REWARD) == {1: 0.5, 2: 0.6, 3: 0.7, 4: 0.8}
    assert values(table, fp16, VAL) == {0: 0.25, 2: 0.5}
    grad = values(table, fp16, M.GRAD_NORM)
    assert grad[1] == 1.0 and math.isnan(grad[3]) and len(grad) == 4  # null kept as NaN
    assert values(table, fp16, "custom/thing") == {4: 3.0}  # unknown metric kept
    assert values(table, "sanity.grpo-bf16-s1", M.REWARD) == {1: 0.4, 2: 0.3}
    assert len(table.metrics) == 4 + 2 + 4 + 1 + 2

    row = table.metrics[table.metrics["run"] == fp16].iloc[0]
    assert (row["scale"], row["experiment"], row["algorithm"], row["precision_train"], row["precision_infer"],
            row["seed"]) == ("tiny", "sanity/grpo", "grpo", "fp16", "fp16", 1)
    assert sorted(table.runs["run"]) == ["sanity.grpo-bf16-s1", fp16]


def test_save_and_read_round_trip(runs_root, tmp_path):
    table = logs.load_runs([runs_root], progress=False)
    out = tmp_path / "results"
    written = logs.save_table(table, out)
    assert {p.name for p in written} == {"metrics.parquet", "metrics.csv", "runs.csv"}
    assert not list(out.glob(".*tmp*"))  # atomic writes leave no temporary files
    back = logs.read_table(out)
    assert back.metrics.shape == table.metrics.shape
    np.testing.assert_array_equal(back.metrics["value"].to_numpy(), table.metrics["value"].to_numpy())
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    assert csv_lines[0].replace('"', "") == ",".join(logs.COLUMNS) and len(csv_lines) == len(table.metrics) + 1


def test_malformed_line_in_the_middle_is_a_user_error(tmp_path):
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1,
              ['{"step": 1, "data": {"critic/score/mean": 0.4}}\nnot json\n{"step": 3, "data": {}}\n'])
    with pytest.raises(UserError, match=r"metrics.jsonl: line 2 is not a metrics record"):
        logs.load_runs([tmp_path], progress=False)


def test_bad_manifest_and_missing_paths(tmp_path):
    run_dir = write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [[rec(1, critic__score__mean=0.5)]])
    (run_dir / "manifest.json").write_text('{"run_name": "x"}')
    with pytest.raises(UserError, match="missing or bad field"):
        logs.load_runs([run_dir], progress=False)
    with pytest.raises(UserError, match="no such run directory"):
        logs.load_runs([tmp_path / "nowhere"], progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no run directories"):
        logs.load_runs([tmp_path / "empty"], progress=False)


def test_manifest_with_an_unknown_precision_is_one_clear_error(tmp_path):
    run_dir = write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [[rec(1, critic__score__mean=0.5)]])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["precision"] = {"train": "fp8", "infer": "fp16"}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"manifest.json: unknown precision 'fp8'"):
        logs.load_runs([run_dir], progress=False)


def test_absent_runs_root_means_no_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PRECISION_RL_RUNS", str(tmp_path / "absent"))
    table = logs.load_runs(None, progress=False)
    assert table.metrics.empty and table.runs.empty
    assert list(table.metrics.columns) == list(logs.COLUMNS)


def test_duplicate_run_identity_keeps_the_newest(tmp_path):
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [[rec(1, critic__score__mean=0.1)]], stamp="20260101T000000Z")
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1, [[rec(1, critic__score__mean=0.9)]], stamp="20260102T000000Z")
    with pytest.warns(logs.LogWarning, match="appears twice"):
        table = logs.load_runs([tmp_path], progress=False)
    assert values(table, "sanity.grpo-fp16-s1", M.REWARD) == {1: 0.9}


def test_wandb_history_export(tmp_path):
    path = tmp_path / "sanity.gspo-bf16-s7.csv"
    path.write_text("_step,_runtime,critic/score/mean,rollout_corr/kl\n1,10,0.5,\n2,20,NaN,0.001\n3,35,0.7,0.002\n")
    table = logs.load_runs([path], wandb_scale="paper", progress=False)
    run = "sanity.gspo-bf16-s7"
    reward = values(table, run, M.REWARD)
    assert reward[1] == 0.5 and math.isnan(reward[2]) and reward[3] == 0.7
    assert values(table, run, M.TOKEN_KL_K1) == {2: 0.001, 3: 0.002}  # empty cell = not logged
    info = table.runs.iloc[0]
    assert (info["experiment"], info["algorithm"], info["precision_train"], info["seed"], info["scale"],
            info["wall_time_s"]) == ("sanity/gspo", "gspo", "bf16", 7, "paper", 35.0)


def test_wandb_chart_export_and_explicit_identity(tmp_path):
    chart = tmp_path / "chart.csv"
    chart.write_text(
        "Step,sanity.grpo-fp16-s1 - critic/score/mean,sanity.grpo-fp16-s1 - critic/score/mean__MIN,"
        "sanity.grpo-fp16-s1 - critic/score/mean__MAX,sanity.grpo-bf16-s1 - critic/score/mean\n"
        "1,0.5,0.4,0.6,0.45\n2,0.6,0.5,0.7,\n")
    table = logs.load_runs([chart], progress=False)
    assert values(table, "sanity.grpo-fp16-s1", M.REWARD) == {1: 0.5, 2: 0.6}
    assert values(table, "sanity.grpo-bf16-s1", M.REWARD) == {1: 0.45}

    odd = tmp_path / "my-run.csv"
    odd.write_text("_step,critic/score/mean\n1,0.3\n")
    with pytest.raises(UserError, match="cannot tell the experiment"):
        wandb_csv.read_wandb_csv(odd)
    (item,) = wandb_csv.read_wandb_csv(odd, experiment="sanity/pg_seq_is", precision="fp16", seed=3)
    assert (item.info.experiment, item.info.algorithm, item.info.seed) == ("sanity/pg_seq_is", "pg_seq_is", 3)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="no step column"):
        wandb_csv.read_wandb_csv(bad)


def test_parse_run_name():
    assert wandb_csv.parse_run_name("ablation.precision-train_bf16-infer_fp32-s42") == (
        "ablation/precision", "train_bf16-infer_fp32", 42)
    assert wandb_csv.parse_run_name("lora.grpo_token_tis_rank1-fp16-s0") == ("lora/grpo_token_tis_rank1", "fp16", 0)
    assert wandb_csv.parse_run_name("whatever") is None
