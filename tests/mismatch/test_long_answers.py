"""The long-answer study: the tiny recipe on long chains, prompts of the same range, results never redone."""

from __future__ import annotations

import pytest

from precision_rl.mismatch import long_answers as L
from precision_rl.mismatch.config import tiny_ops
from precision_rl.paths import LOGS_ENV, RUNS_ENV
from precision_rl.tiny.pretrain import PretrainConfig


def test_only_the_chain_length_and_the_sft_budget_change():
    recipe, base = L.long_config(), PretrainConfig()
    assert (recipe.min_ops, recipe.max_ops) == L.LONG_OPS
    assert (recipe.model, recipe.lr, recipe.problems, recipe.data_seed) == (base.model, base.lr, base.problems,
                                                                           base.data_seed)
    assert recipe.key() not in {base.key(), L.long_config(recipe.steps + 1).key()}


def test_the_study_samples_prompts_of_its_own_range_with_exact_kl(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    calls = []
    monkeypatch.setattr(L, "ensure_tiny_model", lambda config: tmp_path / config.key())
    monkeypatch.setattr(L, "measure", lambda model, name, extra: calls.append((model, name, extra)) or 0)
    assert L.run() == 0
    (model, name, extra), = calls
    assert model == tmp_path / L.long_config().key() and name == L.RESULT_NAME
    args = dict(zip(extra[::2], extra[1::2], strict=True))
    assert tiny_ops(args["--data"]) == L.LONG_OPS and args["--exact-kl"] == "on"
    assert int(args["--max-tokens"]) == L.MAX_TOKENS


@pytest.mark.parametrize("root", ["runs", "logs"])
def test_an_existing_or_published_result_is_kept_without_building(tmp_path, monkeypatch, capsys, root):
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(LOGS_ENV, str(tmp_path / "logs"))
    (tmp_path / root / "mismatch" / L.RESULT_NAME).mkdir(parents=True)
    monkeypatch.setattr(L, "ensure_tiny_model", lambda *a, **k: pytest.fail("an existing result was rebuilt"))
    assert L.run() == 0
    assert "skipped" in capsys.readouterr().out

