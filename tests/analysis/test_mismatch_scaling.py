"""The effect study: mismatch at every prefix length (forced-length results) and against model width."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from precision_rl.analysis import plotting as P
from precision_rl.analysis.mismatch_results import load_offline, publish_mismatch
from precision_rl.analysis.mismatch_scaling import (
    SPREAD_QUANTITIES,
    WIDTH_CSV,
    WIDTH_MD,
    draw_mismatch_scaling,
    growth,
    length_profile,
    length_table,
    load_natural,
    load_profiles,
    natural_dirs,
    natural_length,
    token_kl_spread,
    width_markdown,
    width_of,
    width_table,
    write_width,
)
from precision_rl.analysis.synthetic import write_mismatch_result
from precision_rl.errors import UserError
from precision_rl.mismatch.layout import SEQUENCES, SUMMARY, TOKENS


def _forced(root, model, dtype, rate, growth_per_token=0.0, n_seqs=6, length=300, seed=0):
    """A forced-length result whose exact token KL is rate * (1 + growth_per_token * position)."""
    rng = np.random.default_rng(seed)
    out = root / model / f"{dtype}-{dtype}"
    out.mkdir(parents=True)
    position = np.tile(np.arange(length), n_seqs)
    kl = rate * (1 + growth_per_token * position)
    logp_infer = np.log(rng.uniform(0.1, 1.0, len(position)))
    pd.DataFrame({"seq_id": np.repeat(np.arange(n_seqs), length), "position": position, "token_id": 1,
                  "logp_infer": logp_infer, "logp_train": logp_infer - kl, "exact_kl": kl}).to_parquet(out / TOKENS)
    pd.DataFrame({"seq_id": np.arange(n_seqs), "prompt_id": 0, "length": length,
                  "log_ratio": -kl.reshape(n_seqs, length).sum(axis=1)}).to_parquet(out / SEQUENCES)
    (out / SUMMARY).write_text(json.dumps({"scale": "tiny", "sampling": {"ignore_eos": True}, "infer_dtype": dtype,
                                           "model": f"/cache/tiny-model/{model}"}))
    return out


def _natural(root, model, dtype, exact_kl, mean_length=40.0, model_path=None, token_kl=None):
    """A natural-length result whose summary carries ``exact_kl``; ``token_kl`` (a callable of the token count) fills
    the tokens table's exact KL column, which is absent without it."""
    out = write_mismatch_result(root, model, dtype, dtype, np.random.default_rng(0), n_sequences=3, max_len=60,
                                scale="tiny")
    if token_kl is not None:
        tokens = pd.read_parquet(out / TOKENS)
        tokens.assign(exact_kl=token_kl(len(tokens))).to_parquet(out / TOKENS)
    summary = json.loads((out / SUMMARY).read_text())
    summary.update(exact_kl=exact_kl, mean_abs_prob_diff=exact_kl * 10, exact_seq_kl=exact_kl * mean_length,
                   mean_length=mean_length, infer_dtype=dtype, model=model_path or f"/cache/tiny-model/{model}",
                   sampling={"ignore_eos": False})
    (out / SUMMARY).write_text(json.dumps(summary))
    return out


def test_profile_table_and_growth(tmp_path):
    _forced(tmp_path, "tiny", "bf16", rate=1e-4, growth_per_token=0.01)
    _forced(tmp_path, "tiny", "fp16", rate=1e-6)
    profiles = load_profiles(tmp_path, "tiny")["tiny"]
    bf16, fp16 = profiles["bf16"], profiles["fp16"]
    assert bf16.n_sequences == 6 and len(bf16.prefix_kl) == 300
    expected = np.cumsum(1e-4 * (1 + 0.01 * np.arange(300)))
    np.testing.assert_allclose(bf16.prefix_kl, expected)
    np.testing.assert_allclose(bf16.prefix_k1, expected)  # the sampled-token estimate, exact by construction here
    table = length_table(profiles)
    assert table["length"].tolist() == [16, 32, 64, 128, 256, 300]
    assert table.loc[table.length == 64, "fp16_seq_kl"].item() == pytest.approx(64e-6)
    assert (table["bf16_over_fp16"] > 100).all()
    assert growth(fp16)["last_over_first"] == pytest.approx(1.0)
    assert growth(fp16)["slope_per_token"] == pytest.approx(1e-6)
    assert growth(bf16)["last_over_first"] == pytest.approx((1 + 0.01 * 262) / (1 + 0.01 * 37))  # quarter means


def test_forced_length_results_stay_out_of_fig5_and_natural_ones_out_of_the_study(tmp_path):
    _forced(tmp_path, "tiny-forced", "bf16", rate=1e-4)
    write_mismatch_result(tmp_path, "tiny-natural", "bf16", "bf16", np.random.default_rng(0), n_sequences=4,
                          max_len=50, scale="tiny")
    assert list(load_offline(tmp_path, "tiny")) == ["tiny-natural"]
    assert list(load_profiles(tmp_path, "tiny")) == ["tiny-forced"]


def test_published_copy_gives_the_same_profile(tmp_path):
    _forced(tmp_path / "runs", "tiny", "bf16", rate=3e-5, growth_per_token=0.002)
    publish_mismatch(tmp_path / "runs", tmp_path / "logs")
    a = load_profiles(tmp_path / "runs", "tiny")["tiny"]["bf16"]
    b = load_profiles(tmp_path / "logs", "tiny")["tiny"]["bf16"]
    np.testing.assert_allclose(a.prefix_kl, b.prefix_kl, rtol=1e-9)


def test_natural_length_result_is_refused(tmp_path):
    out = write_mismatch_result(tmp_path, "tiny", "bf16", "bf16", np.random.default_rng(0), n_sequences=4, max_len=50)
    with pytest.raises(UserError, match="no exact_kl"):
        length_profile(out, "tiny", "bf16")
    tokens = pd.read_parquet(out / TOKENS).assign(exact_kl=1e-5)
    tokens.to_parquet(out / TOKENS)
    with pytest.raises(UserError, match="forced-length"):
        length_profile(out, "tiny", "bf16")


def test_width_table_rows_and_ratio(tmp_path):
    for width, kl in ((384, 4e-5), (128, 1e-5)):
        _natural(tmp_path, f"tiny-w{width}", "bf16", kl)
        _natural(tmp_path, f"tiny-w{width}", "fp16", kl / 50)
    _natural(tmp_path, "tiny-069b75dd4af7", "bf16", 1.0)  # the default tiny model, not a width-study one
    _forced(tmp_path, "tiny-w256", "bf16", rate=1.0)  # forced length: not a width row
    table = width_table(tmp_path)
    assert table["width"].tolist() == [128, 384]
    assert table["bf16_exact_kl"].tolist() == [1e-5, 4e-5]
    np.testing.assert_allclose(table["exact_kl_ratio"], [50, 50])
    assert table[[f"bf16_{name}" for name in SPREAD_QUANTITIES]].isna().all().all()  # no exact KL per token
    assert (width_of("tiny-w64"), width_of("tiny-wide"), width_of("069b")) == (64, None, None)
    assert width_table(tmp_path / "absent").empty


def test_natural_length_matches_the_forced_results_model(tmp_path):
    forced = _forced(tmp_path, "tiny-forced", "bf16", rate=1e-4)
    _natural(tmp_path, "key1", "bf16", 1e-5, mean_length=39.0, model_path="/cache/tiny-model/tiny-forced")
    _natural(tmp_path, "key2", "bf16", 1e-5, mean_length=99.0)
    assert natural_length(tmp_path, json.loads((forced / SUMMARY).read_text())) == 39.0
    assert natural_length(tmp_path, {"model": "/elsewhere", "infer_dtype": "bf16"}) is None


def _long(root, dtype, rate, lengths, model="tiny-long"):
    """A natural-length result whose responses have ``lengths`` and an exact token KL of ``rate`` everywhere."""
    out = root / model / f"{dtype}-{dtype}"
    out.mkdir(parents=True)
    seq_id = np.repeat(np.arange(len(lengths)), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    pd.DataFrame({"seq_id": seq_id, "position": position, "token_id": 1, "logp_infer": -1.0,
                  "logp_train": -1.0 - rate, "exact_kl": rate}).to_parquet(out / TOKENS)
    (out / SUMMARY).write_text(json.dumps({"scale": "tiny", "sampling": {"ignore_eos": False}, "infer_dtype": dtype}))
    return out


def test_natural_lengths_give_each_response_its_exact_kl_and_the_slope(tmp_path):
    _long(tmp_path, "bf16", 2e-5, [20, 100, 250])
    _long(tmp_path, "fp16", 1e-6, [30, 200])
    natural = load_natural(tmp_path, "tiny")
    assert sorted(natural) == ["bf16", "fp16"] and sorted(natural_dirs(tmp_path, "tiny")) == ["bf16", "fp16"]
    bf16 = natural["bf16"]
    assert list(bf16.lengths) == [20, 100, 250]
    np.testing.assert_allclose(bf16.seq_kl, [20 * 2e-5, 100 * 2e-5, 250 * 2e-5])
    assert bf16.slope_per_1k == pytest.approx(2e-5 * 1000)  # KL grows linearly with length at a constant token rate
    assert bf16.token_kl(0, 150) == pytest.approx(2e-5) and np.isnan(bf16.token_kl(300))
    assert load_natural(tmp_path, "paper") == {} and load_natural(tmp_path, "tiny", "tiny-w128") == {}
    (tmp_path / "tiny-long" / "bf16-bf16" / TOKENS).unlink()
    pd.DataFrame({"seq_id": [0], "position": [0], "logp_infer": [-1.0], "logp_train": [-1.0]}).to_parquet(
        tmp_path / "tiny-long" / "bf16-bf16" / TOKENS)
    with pytest.raises(UserError, match="no exact_kl column"):
        load_natural(tmp_path, "tiny")


def test_scaling_figure_draws_every_panel_or_says_no_runs(tmp_path):
    _forced(tmp_path, "tiny", "bf16", rate=1e-4)
    _forced(tmp_path, "tiny", "fp16", rate=1e-6)
    for width in (128, 256):
        _natural(tmp_path, f"tiny-w{width}", "bf16", 1e-5)
    _long(tmp_path, "bf16", 2e-5, [20, 100, 250])
    fig = draw_mismatch_scaling(load_profiles(tmp_path, "tiny")["tiny"], width_table(tmp_path), "tiny", 39.0,
                                load_natural(tmp_path, "tiny"))
    ax_width, ax_seq, ax_tok, ax_long = fig.axes[:4]
    assert [line.get_label() for line in ax_width.get_lines()] == ["BF16"]
    assert [line.get_label() for line in ax_seq.get_lines()][:2] == ["BF16 (n=6 responses)", "FP16 (n=6 responses)"]
    assert any("natural length" in line.get_label() for line in ax_tok.get_lines())
    assert [line.get_label() for line in ax_long.get_lines()] == ["BF16: slope 0.02/1K (n=3)"]
    assert all(P.panel_note(ax) is None for ax in (ax_width, ax_seq, ax_tok, ax_long))
    empty = draw_mismatch_scaling({}, width_table(tmp_path / "absent"), "tiny")
    assert [P.panel_note(ax) for ax in empty.axes[:4]] == [P.NO_RUNS] * 4


def _tail(n, heavy=2):
    """``heavy`` tokens of 1.0 nats at the end, the rest 1e-6."""
    return np.r_[np.full(n - heavy, 1e-6), np.ones(heavy)]


def test_the_spread_of_the_token_kl_finds_the_tail(tmp_path):
    out = _natural(tmp_path, "tiny-w384", "bf16", 1e-3, token_kl=_tail)
    n = len(pd.read_parquet(out / TOKENS))
    spread = token_kl_spread(out)
    assert spread["median_token_kl"] == pytest.approx(1e-6) and spread["max_token_kl"] == 1.0
    top = max(1, int(n * 0.01))
    assert spread["tail_kl_share"] == pytest.approx(min(top, 2) / (2 + (n - 2) * 1e-6))
    assert spread["p90_token_kl"] == pytest.approx(1e-6)


def test_the_width_table_is_written_with_its_spread_and_ratio(tmp_path):
    for width, kl in ((128, 1e-5), (384, 4e-5)):
        _natural(tmp_path / "mm", f"tiny-w{width}", "bf16", kl, token_kl=_tail)
        _natural(tmp_path / "mm", f"tiny-w{width}", "fp16", kl / 50, token_kl=lambda n: np.full(n, 1e-7))
    widths = width_table(tmp_path / "mm")
    csv_path, md_path = write_width(widths, tmp_path / "out")
    assert (csv_path.name, md_path.name) == (WIDTH_CSV, WIDTH_MD)
    assert pd.read_csv(csv_path)["fp16_median_token_kl"].tolist() == pytest.approx([1e-7, 1e-7])
    text = md_path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| 384 ")]
    assert [row.split("|")[2].strip() for row in rows] == ["BF16", "FP16"]
    assert "| 1e-06 " in rows[0] and "| 1 " in rows[0]  # median and max of the heavy-tailed BF16 result
    assert "BF16/FP16 ratio of the mean token KL: 128: 50x, 384: 50x." in text
    assert "No width results." in width_markdown(width_table(tmp_path / "absent"))
