"""Success rates of a tiny run's checkpoint at T=1: the checkpoint becomes an fp32 model folder with the shipped
base's config and tokenizer, one engine samples both problem sets, and each model is measured once and its record
read after that. The filter's vLLM sampling itself is tested in tests/data/test_rebuild.py, the conversion of a
real verl checkpoint in tests/verl_ext/test_verl_runs.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from precision_rl.errors import UserError
from precision_rl.tiny import heldout
from precision_rl.tiny.data import ProblemList, TinyDataConfig, read_problem_list
from precision_rl.tiny.shipped import SHIPPED_DIR, WEIGHTS_FILE


def fake_checkpoint(root: Path, step: int, shift: float = 0.0, drop: str | None = None) -> Path:
    """Write a verl-shaped actor checkpoint of the shipped weights (every value moved by ``shift``); return its step
    folder."""
    state = {name: tensor + shift for name, tensor in load_file(SHIPPED_DIR / WEIGHTS_FILE).items()}
    state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])  # verl saves the tied head as well
    if drop:
        state.pop(drop)
    step_dir = root / f"global_step_{step}"
    (step_dir / heldout.ACTOR_WEIGHTS).parent.mkdir(parents=True)
    torch.save(state, step_dir / heldout.ACTOR_WEIGHTS)
    return step_dir


def test_a_checkpoint_becomes_an_fp32_model_folder_with_the_base_tokenizer(tmp_path):
    step_dir = fake_checkpoint(tmp_path / "checkpoints", 25, shift=1e-3)
    out = heldout.checkpoint_model(step_dir, tmp_path / "model")
    written = load_file(out / WEIGHTS_FILE)
    base = load_file(SHIPPED_DIR / WEIGHTS_FILE)
    name = "model.layers.0.mlp.up_proj.weight"
    assert written[name].dtype == torch.float32 and torch.equal(written[name], base[name] + 1e-3)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert (out / "tokenizer.json").read_bytes() == (SHIPPED_DIR / "tokenizer.json").read_bytes()
    assert not (out / "SHA256SUMS").exists()  # the shipped checksums describe the base, not this model


def test_missing_or_foreign_checkpoint_weights_are_one_line(tmp_path):
    with pytest.raises(UserError, match="holds no actor weights"):
        heldout.checkpoint_model(tmp_path / "global_step_5", tmp_path / "out")
    step_dir = fake_checkpoint(tmp_path, 6, drop="model.norm.weight")
    with pytest.raises(UserError, match="does not fit the tiny base model"):
        heldout.checkpoint_model(step_dir, tmp_path / "out")
    (step_dir / heldout.ACTOR_WEIGHTS).write_bytes(b"truncated")
    with pytest.raises(UserError, match="not a readable checkpoint"):
        heldout.checkpoint_model(step_dir, tmp_path / "out")
    with pytest.raises(UserError, match="not a verl checkpoint folder"):
        heldout.model_name(tmp_path / "step5")


def test_only_steps_whose_weights_are_kept_count(tmp_path):
    fake_checkpoint(tmp_path, 50)
    fake_checkpoint(tmp_path, 300)
    (tmp_path / "global_step_25").mkdir()  # verl leaves the data loader's state of an older checkpoint
    assert heldout.checkpoint_steps(tmp_path) == [50, 300]


def test_a_model_is_measured_once_and_its_record_read_after_that(tmp_path, monkeypatch):
    calls = []

    def fake_measure(model_dir, config=None):
        calls.append(Path(model_dir))
        return [heldout.SetRates("validation", 16, (1.0, 0.5, 0.0)), heldout.SetRates("train", 16, (0.25,))]

    monkeypatch.setattr(heldout, "measure", fake_measure)
    step_dir = fake_checkpoint(tmp_path / "checkpoints", 100)
    first = heldout.measured(tmp_path / "records", step_dir)
    again = heldout.measured(tmp_path / "records", step_dir)
    assert first == again and len(calls) == 1
    assert (first[0].mean, first[0].all_right, first[0].none_right) == (0.5, 1, 1)
    record = tmp_path / "records" / "step_100.json"
    doc = json.loads(record.read_text())
    assert doc["model"] == "step_100" and doc["config"]["k"] == TinyDataConfig().k
    with pytest.raises(UserError, match="another problem list or with other filter settings"):
        heldout.read_record(record, replace(TinyDataConfig(), k=8))
    record.write_text("{")
    with pytest.raises(UserError, match="not a readable held-out record"):
        heldout.measured(tmp_path / "records", step_dir)


def test_one_engine_samples_both_sets_and_the_rates_go_back_to_their_set(monkeypatch):
    full = read_problem_list()
    few = ProblemList(full.model_weights_sha256, full.config, full.in_band, full.train[:3], full.validation[:2])
    monkeypatch.setattr(heldout, "read_problem_list", lambda: few)
    pools = []

    def scripted_filter(model_dir, pool, config):
        pools.append([p.question for p in pool])
        return SimpleNamespace(rates=[i / 16 for i in range(len(pool))])

    monkeypatch.setattr(heldout, "filter_pool", scripted_filter)
    validation, train = heldout.measure(SHIPPED_DIR)
    assert pools == [[p["question"] for p in few.validation + few.train]]
    assert (validation.problem_set, validation.rates) == ("validation", (0.0, 1 / 16))
    assert (train.problem_set, train.rates) == ("train", (2 / 16, 3 / 16, 4 / 16))


def test_the_command_names_what_is_missing_in_one_line(tmp_path, monkeypatch, capsys):
    from precision_rl.cli import main
    from precision_rl.launch import runs
    from precision_rl.paths import RUNS_ENV

    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    assert main(["heldout", "--seed", "3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: no local tiny run of sanity/grpo seed 3")
    run_dir = runs.arm_dir(tmp_path / "runs", "tiny", "sanity/grpo", "fp16") / "s3-20260101T000000Z"
    fake_checkpoint(run_dir / runs.CHECKPOINTS_DIR, 50)
    assert main(["heldout", "--precision", "fp16", "--seed", "3", "--step", "7"]) == 2
    assert capsys.readouterr().err.strip().endswith("has no checkpoint weights at step 7 (weights kept: 50)")


def test_the_change_against_the_base_carries_both_standard_errors():
    base = heldout.SetRates("validation", 5, (0.0, 0.4, 1.0))
    model = heldout.SetRates("validation", 5, (0.2, 0.4, 0.6))
    change = heldout.change_from_base(model, base)
    # Differences +0.2, 0, -0.4 (mean -0.0667, sample sd 0.3055); binomial variances p(1-p)/(k-1) summed over both.
    assert change.difference == pytest.approx(-0.2 / 3)
    assert change.problems_se == pytest.approx(0.30551 / 3 ** 0.5, rel=1e-4)
    assert change.sampling_se == pytest.approx(((0.16 + 0.24 + 0.24 + 0.24) / 4) ** 0.5 / 3)
    with pytest.raises(UserError, match="cannot compare train"):
        heldout.change_from_base(heldout.SetRates("train", 5, (0.2,)), base)


def test_the_command_prints_each_checkpoint_against_the_base(tmp_path, monkeypatch, capsys):
    from precision_rl.cli import main
    from precision_rl.launch import runs
    from precision_rl.paths import RUNS_ENV

    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    run_dir = runs.arm_dir(tmp_path / "runs", "tiny", "sanity/grpo", "fp16") / "s3-20260101T000000Z"
    fake_checkpoint(run_dir / runs.CHECKPOINTS_DIR, 50)

    def fake_measure(model_dir, config=None):
        trained = Path(model_dir).resolve() != SHIPPED_DIR.resolve()
        return [heldout.SetRates("validation", 16, (0.25, 0.75) if trained else (0.5, 0.5))]

    monkeypatch.setattr(heldout, "measure", fake_measure)
    assert main(["heldout", "--precision", "fp16", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "vs base" in lines[0] and "SE (over problems)" in lines[0]
    trained = next(line.split() for line in lines if line.startswith("step_50"))
    # Differences -0.25 and +0.25; sampling variances 0.25 * 0.75 / 15 (trained) and 0.5 * 0.5 / 15 (base), twice.
    assert trained[2:7] == ["validation", "0.500", "+0.000", "0.121", "0.250"]
