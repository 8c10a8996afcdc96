"""The paper's figures: panels come from the registry; missing runs or metrics show in the panel, never crash."""

import numpy as np
import pytest

from precision_rl import metrics as M
from precision_rl.analysis import figures as F
from precision_rl.analysis import logs
from precision_rl.analysis import plotting as P
from precision_rl.analysis.synthetic import run_records, write_run
from precision_rl.config.registry import load_all, select


@pytest.fixture(scope="module")
def specs():
    return load_all("tiny")


def test_panels_come_from_the_registry(specs):
    assert F.panel_ids(specs, "fig1") == [f"fig1{c}" for c in "abcdefghijkl"]
    assert F.panel_ids(specs, "fig2") == [f"fig2{c}" for c in "abcdefghijkl"]
    fig3 = {(s.algorithm, a.label) for s, a in F.panel_arms(specs, "fig3")}
    assert fig3 == {("grpo", "bf16"), ("grpo_token_tis", "bf16"), ("grpo_seq_mis", "bf16"), ("gspo", "bf16"),
                    ("pg_seq_is", "fp16")}
    assert {a.label for _, a in F.panel_arms(specs, "fig4")} == {"fp16"}
    assert len(F.panel_arms(specs, "ablation")) == 9
    titles = [F.experiment_title(s) for s, _ in F.panel_arms(specs, "fig1h")]
    assert titles == ["LoRA GRPO-Token-TIS", "LoRA GRPO-Token-TIS"]  # both arms of one experiment


@pytest.mark.parametrize("scale", ["tiny", "paper"])
def test_no_runs_anywhere_shows_no_runs(tmp_path, scale):
    data = F.FigureData(logs.build_table([]), tmp_path / "mismatch")
    for name, build in F.FIGURES.items():
        fig = build(data, scale)
        panels = [P.panel_note(ax) for ax in fig.axes if ax.get_visible() and ax.axison]
        if name == "ablation_precision":  # two curve panels + heat-maps whose cells say "no runs"
            assert panels[:2] == ["no runs", "no runs"]
            assert sum(t.get_text() == "no runs" for ax in fig.axes for t in ax.texts) >= 2 + 2 * 9
        else:
            assert panels and all(n.startswith("no runs") for n in panels), name
        assert P.scale_label(scale) in fig._suptitle.get_text()
        P.plt.close(fig)


def test_a_missing_run_is_no_runs_and_a_missing_metric_is_no_data(tmp_path):
    steps = range(1, 11)
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 1,
              [[{"step": s, "data": {M.REWARD: 0.5 + s / 40, M.TOKEN_KL_K3: 1e-5}} for s in steps]])
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    fig = F.build_fig1(data, "tiny")
    notes = {ax.get_title(): P.panel_note(ax) for ax in fig.axes if ax.axison}
    assert notes["(a) Sanity GRPO"] is None  # drawn
    assert notes["(b) Sanity GRPO-Token-TIS"] == "no runs: make grid\nGRID='sanity/grpo_token_tis'"
    assert sum((n or "").startswith("no runs") for n in notes.values()) == 11
    seeds = [t.get_text() for t in fig.axes[0].texts]
    assert seeds == ["seeds: FP16 1; BF16: not run yet"]  # the drawn arm's seed count and the missing arm
    fig2 = F.build_fig2(data, "tiny")  # the run logged no validation metric
    assert P.panel_note(fig2.axes[0]).startswith("no data")
    fig4 = F.build_fig4(data, "tiny")
    assert P.panel_note(fig4.axes[0]) is None and P.panel_note(fig4.axes[1]).startswith("no data")
    assert "none at this scale" in fig4.axes[3].get_title()  # the tiny sanity set has one validation set
    P.plt.close("all")


def test_draw_figure_rejects_unknown_names(tmp_path):
    from precision_rl.errors import UserError

    data = F.FigureData(logs.build_table([]), tmp_path)
    with pytest.raises(UserError, match="unknown figure"):
        F.draw_figure(data, "fig9", "tiny", tmp_path / "x.png")
    with pytest.raises(UserError, match="unknown scale"):
        F.draw_figure(data, "fig1_training_reward", "huge", tmp_path / "x.png")


def test_fork_ablation_draws_both_settings_in_both_precisions(tmp_path, specs):
    assert {(s.name, a.label) for s, a in F.panel_arms(specs, F.FORK_ABLATION_PANEL)} == {
        (name, arm) for name in ("sanity/grpo", "ablation/fork_changes") for arm in ("fp16", "bf16")}
    steps = range(1, 11)
    for name in ("sanity/grpo", "ablation/fork_changes"):
        write_run(tmp_path, "tiny", name, "bf16", 1,
                  [[{"step": s, "data": {M.REWARD: 0.5 + s / 40, M.TOKEN_KL_K3: 1e-5}} for s in steps]])
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    fig = F.build_fork_ablation(data, "tiny")
    reward = fig.axes[0]
    assert P.panel_note(reward) is None
    styles = {line.get_label(): line.get_linestyle() for line in reward.get_lines() if not line.get_label().startswith("_")}
    assert styles.get("BF16, fork settings") == "-" and styles.get("BF16, verl defaults") == "--", styles
    P.plt.close("all")


def test_seed_note_and_grid_command():
    assert F.seed_note({"FP16": 3, "BF16": 1}, []) == "seeds: FP16 3, BF16 1"
    assert F.seed_note({}, ["BF16"]) == "BF16: not run yet"
    command = F.grid_command(["sanity/gspo", "sanity/gspo"], "tiny")
    assert command == "make grid GRID='sanity/gspo'"
    selector = command.split("GRID=")[1].strip("'")
    assert [spec.name for spec in select([selector], "tiny")] == ["sanity/gspo"]  # the grid accepts it
    assert F.grid_command(["moe/grpo_seq_mis"], "paper").endswith("SCALE=paper (GPU nodes)")


def test_three_seeds_are_counted_per_arm(tmp_path):
    rng = np.random.default_rng(0)
    for seed in (1, 7, 42):
        write_run(tmp_path, "tiny", "sanity/grpo", "fp16", seed, [run_records(5, "fp16", rng)])
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 1, [run_records(5, "bf16", rng)])
    fig = F.build_fig1(F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch"), "tiny")
    assert [t.get_text() for t in fig.axes[0].texts] == ["seeds: FP16 3, BF16 1"]
    P.plt.close("all")
