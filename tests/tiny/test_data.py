"""The tiny sanity set's size against the experiments that train on it at tiny scale."""

from __future__ import annotations

import pytest

from precision_rl.config.registry import load_all
from precision_rl.tiny.data import TRAIN_RECIPE, TinyDataConfig

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
