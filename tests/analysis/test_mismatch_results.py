"""Offline mismatch results: publishing them as CSV text and reading the published copy as the tool's output."""

from __future__ import annotations

import json

import numpy as np
import pytest

from precision_rl.analysis.mismatch_results import load_offline, publish_mismatch, result_dirs
from precision_rl.analysis.synthetic import write_mismatch_result
from precision_rl.errors import UserError
from precision_rl.mismatch.layout import MANIFEST, SEQUENCES, SEQUENCES_CSV, SUMMARY, TOKENS, TOKENS_CSV


def _results(root, rng):
    for dtype, kl in (("bf16", 1e-3), ("fp16", 1e-5)):
        out = write_mismatch_result(root, "tiny-qwen2", dtype, dtype, rng, n_sequences=12, max_len=200,
                                    per_token_kl=kl)
        (out / MANIFEST).write_text(json.dumps({"model": "tiny-qwen2"}))


def test_published_copy_is_text_and_reads_as_the_original(tmp_path):
    src, dest = tmp_path / "runs" / "mismatch", tmp_path / "logs" / "mismatch"
    _results(src, np.random.default_rng(0))
    write_mismatch_result(src, "tiny-qwen2", "fp32", "bf16", np.random.default_rng(9), n_sequences=3)  # a reference
    copies = publish_mismatch(src, dest)
    assert sorted(c.name for c in copies) == ["bf16-bf16", "fp16-fp16"]
    for copy in copies:
        assert sorted(p.name for p in copy.iterdir()) == sorted([TOKENS_CSV, SEQUENCES_CSV, SUMMARY, MANIFEST])
        (copy / TOKENS_CSV).read_text()  # text
    original, published = load_offline(src, "tiny"), load_offline(dest, "tiny")
    for dtype in ("bf16", "fp16"):
        a, b = original["tiny-qwen2"][dtype], published["tiny-qwen2"][dtype]
        np.testing.assert_allclose(a.mu, b.mu, rtol=1e-9)
        np.testing.assert_allclose(a.pi, b.pi, rtol=1e-9)
        np.testing.assert_allclose(np.log(a.pi) - np.log(a.mu), np.log(b.pi) - np.log(b.mu), atol=1e-8)
        np.testing.assert_allclose(a.log_ratio, b.log_ratio, rtol=1e-9)
        assert (a.slope_per_1k, a.seq_kl) == (b.slope_per_1k, b.seq_kl)  # from summary.json


def test_first_root_wins_and_sources_name_the_drawn_folders(tmp_path):
    local, published = tmp_path / "runs", tmp_path / "logs"
    write_mismatch_result(local, "tiny-qwen2", "bf16", "bf16", np.random.default_rng(1), n_sequences=4,
                          per_token_kl=1e-2)
    _results(published, np.random.default_rng(2))
    data = load_offline([local, published, local], "tiny")
    assert data["tiny-qwen2"]["bf16"].seq_kl > 0.05  # the local result, not the published one (~1e-3 per token)
    assert result_dirs([local, published], "tiny") == sorted([local / "tiny-qwen2" / "bf16-bf16",
                                                              published / "tiny-qwen2" / "fp16-fp16"])


def test_publish_replaces_a_copy_and_names_unknown_models(tmp_path):
    src, dest = tmp_path / "runs", tmp_path / "logs"
    _results(src, np.random.default_rng(3))
    publish_mismatch(src, dest, models=["tiny-qwen2"])
    (src / "tiny-qwen2" / "bf16-bf16" / TOKENS).unlink()
    (src / "tiny-qwen2" / "bf16-bf16" / SEQUENCES).unlink()
    with pytest.raises(FileNotFoundError):
        publish_mismatch(src, dest)
    assert (dest / "tiny-qwen2" / "bf16-bf16" / TOKENS_CSV).is_file()  # a failed copy leaves the old one
    with pytest.raises(UserError, match="no mismatch results of other"):
        publish_mismatch(src, dest, models=["other"])
