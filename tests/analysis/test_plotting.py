"""The plotting module: curves, the "no runs" panel, captions, atomic PNG + PDF, and Fig. 5's drawing."""

import numpy as np
import pandas as pd
import pytest

from precision_rl.analysis import plotting as P
from precision_rl.analysis.mismatch_results import find_pairs, load_offline, result_scale
from precision_rl.analysis.synthetic import write_mismatch_result
from precision_rl.errors import UserError


def test_save_figure_writes_png_and_pdf_atomically(tmp_path):
    fig, axes = P.new_figure(1, 2)
    P.mark_empty(axes[0, 0])
    P.add_caption(fig, "A title", "tiny")
    png, pdf = P.save_figure(fig, tmp_path / "out" / "x.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x.pdf", "x.png"]
    with pytest.raises(ValueError):
        P.save_figure(P.new_figure(1, 1)[0], tmp_path / "x.svg")


def test_a_saved_pdf_carries_no_creation_date_so_redrawing_the_same_data_changes_no_byte(tmp_path):
    fig, _ = P.new_figure(1, 1)
    _, pdf = P.save_figure(fig, tmp_path / "x.png")
    assert b"/CreationDate" not in pdf.read_bytes()


def test_caption_and_empty_panel_text():
    fig, axes = P.new_figure(1, 1)
    P.add_caption(fig, "Fig. 1", "tiny", "notes here")
    texts = [t.get_text() for t in fig.texts]
    assert any("tiny scale (CPU)" in t for t in texts) and "tiny scale (CPU)" in fig._suptitle.get_text()
    assert P.panel_note(axes[0, 0]) is None
    P.mark_empty(axes[0, 0])
    assert P.panel_note(axes[0, 0]) == "no runs"


def test_training_curve_raw_ema_and_seed_band():
    fig, axes = P.new_figure(1, 1)
    ax = axes[0, 0]
    assert not P.draw_training_curve(ax, [None, pd.Series(dtype=float)], "g", "FP16")
    steps = np.arange(1, 101)
    seeds = [pd.Series(np.linspace(0, 1, 100) + off, index=steps) for off in (0.0, 0.1)]
    assert P.draw_training_curve(ax, seeds, P.PRECISION_COLORS["fp16"], "FP16")
    lines = ax.get_lines()
    assert len(lines) == 2  # faint raw mean + bold EMA
    assert lines[0].get_alpha() == P.RAW_ALPHA and lines[1].get_linewidth() > lines[0].get_linewidth()
    assert lines[1].get_label() == "FP16 (n=2)"
    assert len(ax.collections) == 1  # the min-max band
    np.testing.assert_allclose(lines[0].get_ydata(), np.linspace(0, 1, 100) + 0.05)


def test_offline_mismatch_reading_and_drawing(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "mismatch"
    write_mismatch_result(root, "tiny-qwen2", "bf16", "bf16", rng, n_sequences=20, max_len=300, per_token_kl=1e-3)
    write_mismatch_result(root, "tiny-qwen2", "fp16", "fp16", rng, n_sequences=20, max_len=300, per_token_kl=1e-5)
    write_mismatch_result(root, "tiny-qwen2", "bf16", "fp32", rng, n_sequences=5, max_len=100)  # not a self-pair
    write_mismatch_result(root, "R1-Distill-1.5B", "bf16", "bf16", rng, n_sequences=5, max_len=100, scale="paper")
    assert len(find_pairs(root)) == 4
    assert result_scale("tiny-qwen2", {}) == "tiny" and result_scale("x", {"scale": "tiny"}) == "tiny"
    data = load_offline(root, "tiny")
    assert list(data) == ["tiny-qwen2"] and sorted(data["tiny-qwen2"]) == ["bf16", "fp16"]
    bf16 = data["tiny-qwen2"]["bf16"]
    assert bf16.seq_kl == pytest.approx(-bf16.log_ratio.mean())
    assert len(bf16.mu) == len(bf16.pi) and ((bf16.mu > 0) & (bf16.mu <= 1)).all()

    fig = P.draw_offline_mismatch(data, "tiny")
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["tiny-qwen2: Token Probability (BF16)", "Token Probability (FP16)",
                                             "Seq mismatch v.s. Len (BF16)", "Seq mismatch v.s. Len (FP16)"]
    assert any(t.get_text().startswith("Slope = ") and "KL[μ|π] = " in t.get_text() for t in axes[2].texts)
    assert axes[2].get_ylim() == axes[3].get_ylim()  # shared y-range, as in the paper
    assert any(line.get_linestyle() == "--" for line in axes[0].get_lines())  # the π = μ diagonal

    empty = P.draw_offline_mismatch(load_offline(tmp_path / "absent", "tiny"), "tiny")
    assert [P.panel_note(a) for a in empty.axes] == ["no runs"] * 4


def test_badly_named_mismatch_folder(tmp_path):
    bad = tmp_path / "model" / "bfloat16"
    bad.mkdir(parents=True)
    (bad / "summary.json").write_text("{}")
    with pytest.raises(UserError, match="named <train>-<infer>"):
        find_pairs(tmp_path)


@pytest.mark.parametrize("name,accepted", [("fp16-fp8_e4m3", True), ("bf16-fp4_e2m1", True),
                                           ("fp8_e4m3-fp16", False), ("fp16-int8", False)])
def test_a_quantized_rollout_is_a_mismatch_result_a_quantized_trainer_is_not(tmp_path, name, accepted):
    # `make mismatch PAIRS=fp16-fp8_e4m3` writes such a folder; every reader of runs/mismatch must take it
    pair = tmp_path / "tiny" / name
    pair.mkdir(parents=True)
    (pair / "summary.json").write_text("{}")
    if accepted:
        assert [(t, i) for _, t, i, _ in find_pairs(tmp_path)] == [tuple(name.split("-"))]
    else:
        with pytest.raises(UserError, match="training dtype one of fp16, bf16, fp32 and the rollout.s one of"):
            find_pairs(tmp_path)
