"""A tiny-scale run through the command line: run directory, verl-format metrics, resume into a new attempt,
and bf16/fp16 arms whose manifests differ only in precision keys.

The untrained model and a test-only reward (1 for an even-length response) stand in for the SFT model and the
grader, so the run exercises every path in seconds; the real model is exercised by `make sanity-fp16`.
"""

from __future__ import annotations

import json

import pytest

from precision_rl import cli, launch, runs

pytestmark = pytest.mark.slow

SMALL = ["trainer.total_training_steps=2", "trainer.test_freq=2", "data.train_batch_size=4",
         "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "data.max_response_length=16", "actor_rollout_ref.rollout.val_kwargs.n=1"]


@pytest.fixture
def tiny_env(tmp_path, monkeypatch, tiny_random_model):
    from precision_rl.data.recipes import Recipe, write_dataset
    from precision_rl.data.sources import Problem
    from precision_rl.reward import grader
    from precision_rl.tiny import data as tiny_data
    from precision_rl.tiny import runner
    from precision_rl.tiny.problems import make_problems

    monkeypatch.setenv(runs.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(launch.DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(runner, "resolve_model", lambda name: tiny_random_model)

    def datasets(model_dir, train, val, root=None, config=None):
        problems = [Problem(p.question, p.answer) for p in make_problems(12, seed=9)]
        out = []
        for name, split, rows in ((train, "train", problems[:8]), (val[0], "test", problems[8:])):
            result = write_dataset(Recipe(name, "test set", split, tiny_data.TEMPLATE), rows, {"test": True},
                                   tmp_path / "data")
            out.append(tmp_path / "data" / name / f"{split}.parquet")
            assert result.status == "built"
        return out[0], [out[1]]

    monkeypatch.setattr(tiny_data, "ensure_datasets", datasets)
    monkeypatch.setattr(grader, "grade_batch", lambda responses, gts, template, truncated=None: [
        grader.GradeResult(float(len(r) % 2 == 0), len(r) % 2 == 0, None, True) for r in responses])
    return tmp_path


def _run(*argv: str) -> int:
    return cli.main(["run", "sanity/grpo", "--scale", "tiny", *argv])


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tiny_run_resume_and_precision_arms(tiny_env, capsys):
    assert _run("--precision", "bf16", "--", *SMALL) == 0
    arm_dir = tiny_env / "runs" / "tiny" / "sanity" / "grpo" / "bf16"
    (run_dir,) = list(arm_dir.iterdir())
    manifest = runs.read_manifest(run_dir)
    assert manifest["status"] == "finished" and manifest["scale"] == "tiny"
    assert manifest["attempts"][0]["exit_status"] == 0
    lines = _lines(run_dir / "metrics.jsonl")
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert set(lines[0]["data"]) == {"val-core/tiny_sanity_val/acc/mean@1", "timing_s/testing"}
    assert "val-core/tiny_sanity_val/acc/mean@1" in lines[2]["data"]
    assert {"critic/score/mean", "rollout_corr/k3_kl", "actor/grad_norm"} <= set(lines[1]["data"])
    assert (run_dir / "checkpoint.pt").is_file() and "tiny run sanity.grpo-bf16-s42" in (run_dir / "train.log").read_text()
    first = (run_dir / "metrics.jsonl").read_bytes()

    # RESUME=1 continues from the checkpoint into a new attempt file; the first attempt's lines stay untouched.
    more = [o.replace("total_training_steps=2", "total_training_steps=3") for o in SMALL]
    assert _run("--precision", "bf16", "--resume", "--", *more) == 0
    assert (run_dir / "metrics.jsonl").read_bytes() == first
    assert [line["step"] for line in _lines(run_dir / "metrics.attempt1.jsonl")] == [3]
    assert [a["status"] for a in runs.read_manifest(run_dir)["attempts"]] == ["finished", "finished"]

    # The fp16 arm of the same experiment: its manifest differs from bf16's only where precision is set.
    assert _run("--precision", "fp16", "--", *SMALL[1:], "trainer.total_training_steps=1") == 0
    (fp16_dir,) = list((arm_dir.parent / "fp16").iterdir())
    a, b = runs.read_manifest(run_dir), runs.read_manifest(fp16_dir)
    only = set(a["verl_overrides"]) ^ set(b["verl_overrides"])
    only -= {"trainer.total_training_steps=2", "trainer.total_training_steps=1"}
    assert only and all("param_dtype" in o or "rollout.dtype" in o for o in only), only
    assert a["spec"] == b["spec"] and a["precision"]["train"] == "bf16" and b["precision"]["train"] == "fp16"
    assert _lines(fp16_dir / "metrics.jsonl")[-1]["data"]["precision/loss_scale"] <= 65536.0


def test_tiny_dry_run_describes_and_writes_nothing(tiny_env, capsys):
    assert _run("--precision", "fp16", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "tiny run sanity.grpo-fp16-s42" in out and "train fp16 / infer fp16" in out
    assert not (tiny_env / "runs").exists()


def test_unknown_tiny_experiment_is_a_clear_error(tiny_env, capsys):
    assert cli.main(["run", "sanity/nope", "--scale", "tiny"]) == 2
    assert "unknown experiment" in capsys.readouterr().err
