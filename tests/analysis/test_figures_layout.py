"""Figures read at a glance: notes stay inside their panels, avoid the curves, and never cover titles or legends."""

import numpy as np
import pandas as pd
import pytest

from precision_rl.analysis import figures as F
from precision_rl.analysis import logs
from precision_rl.analysis import plotting as P
from precision_rl.analysis.synthetic import run_records, write_run
from precision_rl.tiny.data import VAL_RECIPE


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    P.plt.close("all")


def _inside(inner, outer, slack: float = 1.0) -> bool:
    return (inner.x0 >= outer.x0 - slack and inner.x1 <= outer.x1 + slack and inner.y0 >= outer.y0 - slack
            and inner.y1 <= outer.y1 + slack)


def _notes(ax):
    return [t for t in ax.texts if t.get_gid() in (P.EMPTY_GID, P.NOTE_GID)]


@pytest.mark.parametrize("scale", ["tiny", "paper"])
def test_every_note_fits_inside_its_panel(tmp_path, scale):
    rng = np.random.default_rng(0)
    for seed in (1, 7, 42):
        write_run(tmp_path, scale, "sanity/grpo", "fp16", seed, [run_records(30, "fp16", rng, n_metrics=0,
                                                                              val_sets=(VAL_RECIPE,))])
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    for name in ("fig1_training_reward", "fig2_eval_accuracy", "fig3_mismatch_dynamics", "fig4_fp16_algorithms",
                 "ablation_precision", "ablation_fork_changes"):
        fig = F.FIGURES[name](data, scale)
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            frame = ax.get_window_extent(renderer)
            for text in _notes(ax):
                assert _inside(text.get_window_extent(renderer), frame), (name, ax.get_title(), text.get_text())
        P.plt.close(fig)


def test_a_header_note_sits_between_the_legend_and_the_panel_titles(tmp_path):
    rng = np.random.default_rng(1)
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42, [run_records(20, "bf16", rng, n_metrics=0)])
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    fig = F.build_fig3(data, "tiny")
    renderer = fig.canvas.get_renderer()
    (header,) = [t for t in fig.texts if t.get_gid() == P.NOTE_GID]
    note = header.get_window_extent(renderer)
    legend = fig.legends[0].get_window_extent(renderer)
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    suptitle = fig._suptitle.get_window_extent(renderer)
    assert suptitle.y0 >= legend.y1 - 1 and legend.y0 >= note.y1 - 1  # title, legend, note, top to bottom
    assert all(note.y0 >= t.y1 for t in titles)
    width, height = (fig.axes[0].get_position().width * fig.get_figwidth(),
                     fig.axes[0].get_position().height * fig.get_figheight())
    assert (round(width, 2), round(height, 2)) == (3.0, 2.4)  # the note grows the figure, not the panels


def test_a_corner_note_goes_where_the_curves_are_not():
    fig, axes = P.new_figure(1, 2)
    steps = np.arange(1, 51)
    falling, rising = axes[0, 0], axes[0, 1]
    P.draw_eval_curve(falling, [pd.Series(np.linspace(0.5, 0.2, 50), index=steps)], "g", "FP16")
    P.draw_training_curve(rising, [pd.Series(np.linspace(0.2, 0.9, 50), index=steps)], "g", "FP16")
    P.corner_note(falling, ["FP16: 1 seed"])
    P.corner_note(rising, ["FP16: 1 seed"])
    (low,) = _notes(falling)
    (high,) = _notes(rising)
    assert low.get_position()[1] > 0.5 and low.get_position()[0] > 0.5  # upper right: the curve falls to the right
    assert high.get_position() == (0.98, 0.03)  # lower right: the curve rises


def test_wrapping_keeps_commands_and_names_whole():
    text = P.wrap_lines(["BF16 GRPO-Token-TIS, BF16 GSPO: not run yet —",
                         "make grid EXP='sanity/grpo_token_tis sanity/gspo' SCALE=tiny"], 20)
    words = text.split()
    assert "GRPO-Token-TIS," in words and "EXP='sanity/grpo_token_tis" in words and "SCALE=tiny" in words
    assert text.split("\n")[0] == "BF16 GRPO-Token-TIS,"  # a new paragraph starts a new line


def test_a_header_note_sits_under_a_legend_of_several_rows(tmp_path):
    rng = np.random.default_rng(2)
    for experiment, arm in [("sanity/grpo", "fp16"), ("sanity/grpo", "bf16"), ("ablation/precision", "fp32"),
                            ("ablation/precision", "train_bf16-infer_fp16"),
                            ("ablation/precision", "train_bf16-infer_fp32"),
                            ("ablation/precision", "train_fp16-infer_bf16")]:
        write_run(tmp_path, "tiny", experiment, arm, 42, [run_records(20, arm.split("-")[0][-4:], rng, n_metrics=0)])
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    fig = F.build_ablation(data, "tiny")
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert legend.height > 2 * P.HEADER_LINE * fig.dpi  # the six arms take more than one row
    (header,) = [t for t in fig.texts if t.get_gid() == P.NOTE_GID]
    note = header.get_window_extent(renderer)
    assert legend.y0 >= note.y1 - 1 and all(note.y0 >= ax.title.get_window_extent(renderer).y1 for ax in fig.axes)
