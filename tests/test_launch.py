"""Launcher and command line: dry runs print and write nothing; real runs get a fresh, complete run directory."""

from __future__ import annotations

import json

import pytest

from precision_rl import cli, launch, runs, scale
from precision_rl.registry import load_experiment
from precision_rl.scale import ScaleDecision

PAPER = ScaleDecision("paper", "paper", "test")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(runs.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(launch.DATA_DIR_ENV, str(tmp_path / "data"))
    return tmp_path


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_one_command_and_writes_nothing(capsys, isolated):
    code, out, err = run_cli(capsys, "run", "sanity/grpo", "--precision", "fp16", "--scale", "paper", "--dry-run")
    assert code == 0 and out.count("\n") == 1
    assert "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16" in out
    assert "actor_rollout_ref.rollout.dtype=float16" in out
    assert "python -m verl.trainer.main_ppo" in out and "VERL_FILE_LOGGER_PATH=" in out
    assert "SCALE=paper -> paper" in err
    assert not (isolated / "runs").exists()


def test_extra_overrides_pass_through(capsys):
    code, out, _ = run_cli(capsys, "run", "sanity/grpo", "--precision", "bf16", "--scale", "paper", "--dry-run",
                           "--extra", "trainer.save_freq=50", "--", "trainer.val_before_train=false")
    assert code == 0 and "trainer.save_freq=50" in out and out.strip().endswith("trainer.val_before_train=false")


def test_panel_selection_follows_the_registry(capsys):
    code, out, _ = run_cli(capsys, "run", "sanity/*", "--panel", "fig3", "--scale", "paper", "--dry-run")
    lines = out.strip().splitlines()
    names = sorted(line.split("trainer.experiment_name=")[1].split()[0] for line in lines)
    assert names == ["sanity.grpo-bf16-s42", "sanity.grpo_seq_mis-bf16-s42", "sanity.grpo_token_tis-bf16-s42",
                     "sanity.gspo-bf16-s42", "sanity.pg_seq_is-fp16-s42"]


@pytest.mark.parametrize("argv,message", [
    (["run", "sanity/nope", "--scale", "paper", "--dry-run"], "unknown experiment 'sanity/nope'"),
    (["run", "sanity/grpo", "--precision", "fp8", "--scale", "paper", "--dry-run"], "unknown precision 'fp8'"),
    (["run", "sanity/grpo", "--precision", "fp32", "--scale", "paper", "--dry-run"], "has no precision arm 'fp32'"),
    (["run", "sanity/grpo", "--scale", "paper", "--dry-run", "--loggers", "stdout"], "unknown logger 'stdout'"),
    (["run", "sanity/grpo", "--scale", "paper", "--resume", "--dry-run"], "no earlier run"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err


def test_paper_scale_without_gpu_refuses(capsys, monkeypatch):
    monkeypatch.setattr(scale, "paper_scale_problem", lambda: "no CUDA GPU found")
    code, _, err = run_cli(capsys, "run", "sanity/grpo", "--precision", "fp16", "--scale", "paper")
    assert code == 2 and "SCALE=paper needs CUDA GPUs" in err


def test_auto_scale_decides_loudly(monkeypatch):
    monkeypatch.setattr(scale, "paper_scale_problem", lambda: "no CUDA GPU found")
    assert scale.resolve_scale("auto") == ScaleDecision("auto", "tiny", "no CUDA GPU found")
    monkeypatch.setattr(scale, "paper_scale_problem", lambda: None)
    assert scale.resolve_scale("auto").scale == "paper"
    with pytest.raises(Exception, match="unknown SCALE"):
        scale.resolve_scale("huge")


def _fake_verl(plan, body: str):
    """Point the plan at a stand-in for verl that writes one metrics line where verl's file logger would."""
    plan.argv = ["python", "-c", body]
    return plan


FAKE = ("import json, os, sys; p = os.environ['VERL_FILE_LOGGER_PATH']; "
        "open(p, 'w').write(json.dumps({'step': 1, 'data': {'critic/score/mean': 0.5}}) + '\\n'); "
        "print('step:1'); sys.exit(CODE)")


def _data_files(isolated, spec):
    for name, split in [(spec.data.train, "train")] + [(v, "test") for v in spec.data.val]:
        path = isolated / "data" / name / f"{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1")


def test_a_run_records_manifest_log_and_metrics(isolated):
    spec = load_experiment("sanity/grpo")
    _data_files(isolated, spec)
    plan = _fake_verl(launch.plan_run(spec, spec.arm("fp16"), PAPER, launch.RunOptions(seed=3)), FAKE.replace("CODE", "0"))
    assert launch.execute_paper(plan) == 0
    run_dir = plan.run_dir
    assert run_dir.parent == isolated / "runs" / "paper" / "sanity" / "grpo" / "fp16" and run_dir.name.startswith("s3-")
    manifest = runs.read_manifest(run_dir)
    assert manifest["status"] == "finished" and manifest["attempts"][0]["exit_status"] == 0
    assert manifest["precision"] == {"label": "fp16", "train": "fp16", "infer": "fp16"} and manifest["seed"] == 3
    assert manifest["run_name"] == "sanity.grpo-fp16-s3" and "git" in manifest and manifest["versions"]["verl"] == "0.9.1"
    assert any(o.endswith(str(run_dir / "metrics.jsonl")) for o in manifest["verl_overrides"])
    assert json.loads((run_dir / "metrics.jsonl").read_text())["step"] == 1
    assert "step:1" in (run_dir / "train.log").read_text()

    # The same second cannot give a second run the same directory, and a failed resume keeps the first file.
    again = _fake_verl(launch.plan_run(spec, spec.arm("fp16"), PAPER, launch.RunOptions(seed=3, resume=True)),
                       FAKE.replace("CODE", "1"))
    assert again.run_dir == run_dir and again.metrics_path.name == "metrics.attempt1.jsonl"
    assert "trainer.resume_mode=auto" in again.overrides
    assert launch.execute_paper(again) == 1
    manifest = runs.read_manifest(run_dir)
    assert manifest["status"] == "failed" and [a["attempt"] for a in manifest["attempts"]] == [0, 1]
    assert runs.attempt_files(run_dir) == [run_dir / "metrics.jsonl", run_dir / "metrics.attempt1.jsonl"]


def test_an_existing_run_directory_is_never_reused(isolated, monkeypatch):
    spec = load_experiment("sanity/grpo")
    monkeypatch.setattr(runs, "utc_stamp", lambda now=None: "20260101T000000Z")
    plan = launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    plan.run_dir.mkdir(parents=True)
    (plan.run_dir / "metrics.jsonl").write_text("keep\n")
    with pytest.raises(Exception, match="already exists"):
        launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    assert (plan.run_dir / "metrics.jsonl").read_text() == "keep\n"


def test_missing_data_is_a_clear_error(isolated):
    spec = load_experiment("sanity/grpo")
    plan = launch.plan_run(spec, spec.arm("bf16"), PAPER, launch.RunOptions())
    with pytest.raises(Exception, match="dataset file .*sanity/train.parquet is missing: build it with `make data`"):
        launch.execute_paper(plan)
    assert not plan.run_dir.exists()
