"""The tiny sanity set: its size against the experiments that train on it, and its committed problem selection."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from precision_rl.config.registry import load_all
from precision_rl.data.sources import Problem
from precision_rl.errors import UserError
from precision_rl.tiny.data import (
    COMMITTED,
    STAMP_FILE,
    TRAIN_RECIPE,
    TinyDataConfig,
    committed_selection,
    dataset_stamp,
    ensure_datasets,
    selected_problems,
    write_selection,
)
from precision_rl.tiny.pretrain import BUILD_RECORD, PretrainConfig
from precision_rl.tiny.problems import make_problems

TINY_SPECS = {name: spec for name, spec in load_all("tiny").items() if spec.data.train == TRAIN_RECIPE}


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


# ------------------------------------------------------------------ the committed problem selection

def _fake_model(tmp_path: Path, key: str) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / BUILD_RECORD).write_text(json.dumps({"key": key}))
    return model


def test_committed_selection_belongs_to_the_default_model_and_recipe():
    selection = committed_selection(PretrainConfig().key())
    assert selection is not None, "sanity_selection.json does not match the default tiny model and recipe"
    assert len(selection.pool_indices) == TinyDataConfig().max_train
    assert all(TinyDataConfig().low <= r <= TinyDataConfig().high for r in selection.success_rates)
    assert committed_selection("another-model") is None
    assert committed_selection(PretrainConfig().key(), replace(TinyDataConfig(), seed=12)) is None


def test_selection_takes_its_questions_from_the_generated_pool():
    config = TinyDataConfig()
    pool = [Problem(p.question, p.answer) for p in make_problems(config.pool + config.val_problems, config.seed)]
    selection = committed_selection(PretrainConfig().key())
    picked = selected_problems(pool[: config.pool], selection)
    assert [p.question for p in picked] == list(selection.questions)
    assert [p.extra["success_rate"] for p in picked] == list(selection.success_rates)
    shuffled = pool[1:] + pool[:1]
    with pytest.raises(UserError, match="generator changed"):
        selected_problems(shuffled, selection)


def test_build_from_the_selection_needs_no_engine_and_is_cached(tmp_path):
    model = _fake_model(tmp_path, PretrainConfig().key())
    train, (val,) = ensure_datasets(model, root=tmp_path / "data")
    rows = pd.read_parquet(train)
    assert [r["question"] for r in rows["extra_info"]] == list(committed_selection(PretrainConfig().key()).questions)
    assert len(pd.read_parquet(val)) == TinyDataConfig().val_problems
    stamp = json.loads((train.parent / STAMP_FILE).read_text())
    assert stamp["selection"] == COMMITTED and stamp == dataset_stamp(model)
    built = train.stat().st_mtime_ns
    ensure_datasets(model, root=tmp_path / "data")
    assert train.stat().st_mtime_ns == built


def test_written_selection_reads_back(tmp_path):
    config = TinyDataConfig()
    pool = [Problem(p.question, p.answer) for p in make_problems(config.pool, config.seed)]
    kept = [Problem(pool[i].question, pool[i].answer, {"success_rate": 0.5}) for i in (3, 1, 8)]
    path = write_selection("key-1", config, pool, kept, in_band=40, path=tmp_path / "selection.json")
    selection = committed_selection("key-1", config, path)
    assert selection.pool_indices == (3, 1, 8) and selection.success_rates == (0.5, 0.5, 0.5)
    assert selected_problems(pool, selection) == kept
