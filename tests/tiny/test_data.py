"""The tiny sanity set: the committed problem list belongs to the shipped model and the code's filter settings, is
large enough to measure and disjoint from its validation set; the parquets come from it without an engine."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pandas as pd
import pytest

from precision_rl.config.registry import load_all
from precision_rl.errors import UserError
from precision_rl.tiny.data import (
    STAMP_FILE,
    TRAIN_RECIPE,
    TinyDataConfig,
    checked_problem_list,
    dataset_stamp,
    ensure_datasets,
    generated_problems,
    problem_list_doc,
    read_problem_list,
)
from precision_rl.tiny.shipped import SHIPPED_DIR, weights_sha256

TINY_SPECS = {name: spec for name, spec in load_all("tiny").items() if spec.data.train == TRAIN_RECIPE}
MIN_PROBLEMS = 128  # fewer, and the training reward moves in coarse steps and the set is memorised


def test_every_tiny_experiment_trains_on_the_tiny_set():
    assert set(TINY_SPECS) == set(load_all("tiny"))


@pytest.mark.parametrize("name", sorted(TINY_SPECS))
def test_one_generation_batch_fits_the_tiny_set(name):
    # The runner refuses a training set smaller than one generation batch.
    hyper = TINY_SPECS[name].hyper
    assert (hyper.gen_batch_size or hyper.train_batch_size) <= TinyDataConfig().max_train


@pytest.mark.parametrize("name", sorted(TINY_SPECS))
def test_mini_batches_split_the_batch_evenly(name):
    hyper = TINY_SPECS[name].hyper
    assert hyper.train_batch_size % hyper.ppo_mini_batch_size == 0


def test_the_committed_list_belongs_to_the_shipped_model_and_the_filter_settings():
    config = TinyDataConfig()
    problems = checked_problem_list(SHIPPED_DIR)
    assert problems.model_weights_sha256 == weights_sha256()
    assert len(problems.train) == config.max_train >= MIN_PROBLEMS
    assert len(problems.validation) == config.val_problems
    assert all(config.low <= p["success_rate"] <= config.high for p in problems.train)
    assert problems.in_band >= len(problems.train)


def test_the_committed_list_is_what_the_generator_draws():
    pool, validation = generated_problems()
    problems = read_problem_list()
    for entry in problems.train:
        drawn = pool[entry["pool_index"]]
        assert (entry["question"], entry["answer"], entry["ops"]) == (drawn.question, drawn.answer, len(drawn.steps))
    assert [(e["question"], e["answer"]) for e in problems.validation] == [(p.question, p.answer) for p in validation]
    assert not {e["question"] for e in problems.train} & {e["question"] for e in problems.validation}


def test_another_model_or_other_filter_settings_are_refused(tmp_path):
    with pytest.raises(UserError, match="REFILTER=1"):
        checked_problem_list(SHIPPED_DIR, replace(TinyDataConfig(), seed=12))
    other = tmp_path / "model"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(UserError, match="was filtered with the model"):
        checked_problem_list(other)


def test_a_malformed_list_is_one_line(tmp_path):
    broken = tmp_path / "problems.json"
    broken.write_text('{"train": [')
    with pytest.raises(UserError, match="not a readable tiny problem list"):
        read_problem_list(broken)


def test_the_list_document_keeps_the_first_problems_in_the_band():
    config = replace(TinyDataConfig(), max_train=2, val_problems=1)
    pool, validation = generated_problems(replace(config, pool=5))
    doc = problem_list_doc("abc", config, pool, [0.1, 0.5, 0.9, 0.2, 0.8], validation)
    assert [p["pool_index"] for p in doc["train"]] == [1, 3] and doc["in_band"] == 3
    assert doc["config"] == dataclasses.asdict(config) and len(doc["validation"]) == 1
    with pytest.raises(UserError, match="solved only 1 of 5"):
        problem_list_doc("abc", replace(config, max_train=2), pool, [0.1, 0.5, 0.9, 0.0, 1.0], validation)


def test_build_from_the_list_needs_no_engine_and_is_cached(tmp_path):
    train, (val,) = ensure_datasets(SHIPPED_DIR, root=tmp_path / "data")
    rows = pd.read_parquet(train)
    problems = read_problem_list()
    assert [r["question"] for r in rows["extra_info"]] == [p["question"] for p in problems.train]
    assert len(pd.read_parquet(val)) == TinyDataConfig().val_problems
    assert json.loads((train.parent / STAMP_FILE).read_text()) == dataset_stamp()
    built = train.stat().st_mtime_ns
    ensure_datasets(SHIPPED_DIR, root=tmp_path / "data")
    assert train.stat().st_mtime_ns == built

