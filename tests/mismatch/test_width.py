"""The width study's models: the tiny recipe with only the width changed, and results that are never redone."""

from __future__ import annotations

import pytest

from precision_rl.errors import UserError
from precision_rl.mismatch import width as W
from precision_rl.paths import LOGS_ENV, RUNS_ENV
from precision_rl.tiny.model import TinyModelConfig
from precision_rl.tiny.pretrain import PretrainConfig


def test_only_the_width_changes():
    base = TinyModelConfig()
    for width in W.WIDTHS:
        model = W.width_config(width).model
        assert model.hidden_size == width
        assert model.intermediate_size / width == base.intermediate_size / base.hidden_size
        assert model.hidden_size // model.num_attention_heads == W.HEAD_DIM
        assert model.num_attention_heads == 2 * model.num_key_value_heads
        assert (model.num_hidden_layers, model.vocab_size, model.seed) == (base.num_hidden_layers, base.vocab_size,
                                                                           base.seed)
    assert W.width_config(base.hidden_size).model == base  # the tiny model's own architecture
    recipe = W.width_config(base.hidden_size)
    assert recipe.steps == W.STUDY_STEPS and recipe.key() != PretrainConfig().key()
    assert len({W.width_config(w).key() for w in W.WIDTHS}) == len(W.WIDTHS)
    with pytest.raises(UserError, match="multiple of 128"):
        W.width_config(192)


def test_existing_results_are_skipped_without_building(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(LOGS_ENV, str(tmp_path / "logs"))
    (tmp_path / "runs" / "mismatch" / W.result_name(128)).mkdir(parents=True)
    (tmp_path / "logs" / "mismatch" / W.result_name(512)).mkdir(parents=True)  # published only: a fresh clone's case
    monkeypatch.setattr(W, "ensure_tiny_model", lambda *a, **k: pytest.fail("a finished width was rebuilt"))
    assert W.run((128, 512)) == 0
    out = capsys.readouterr().out
    assert out.count("skipped") == 2 and str(tmp_path / "logs" / "mismatch" / W.result_name(512)) in out


def test_redo_measures_existing_widths_again_and_replaces_their_results(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(LOGS_ENV, str(tmp_path / "logs"))
    (tmp_path / "logs" / "mismatch" / W.result_name(128)).mkdir(parents=True)
    monkeypatch.setattr(W, "ensure_tiny_model", lambda config, *a, **k: tmp_path / config.key())
    calls = []
    monkeypatch.setattr(W, "measure", lambda model, name, extra=(): calls.append((model, name, extra)) or 0)
    assert W.run((128,), redo=True) == 0
    assert calls == [(tmp_path / W.width_config(128).key(), W.result_name(128), ("--overwrite",))]
    assert W.main(["--widths", "128", "--redo"]) == 0 and calls[-1][2] == ("--overwrite",)
