"""The paper's figures: panels come from the registry; every panel states each arm's seeds or why it is missing."""

import re
import socket

import numpy as np
import pytest
from matplotlib.colors import to_hex

from precision_rl import metrics as M
from precision_rl.analysis import figures as F
from precision_rl.analysis import logs
from precision_rl.analysis import panel_notes as N
from precision_rl.analysis import plotting as P
from precision_rl.analysis.synthetic import run_records, write_run
from precision_rl.cli import _decide_and_select, build_parser
from precision_rl.config.registry import load_all
from precision_rl.tiny.data import VAL_RECIPE

RUN_FIGURES = [name for name in F.FIGURES if name not in ("fig5_offline_mismatch", "effect_mismatch_scaling")]


@pytest.fixture(scope="module")
def specs():
    return load_all("tiny")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    P.plt.close("all")


def _panels(fig) -> dict:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title()}


def _legend(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def _records(steps: int, precision: str, rng, drop: tuple[str, ...] = ()) -> list[dict]:
    records = run_records(steps, precision, rng, n_metrics=0, val_sets=(VAL_RECIPE,), test_freq=5)
    return [{"step": r["step"], "data": {k: v for k, v in r["data"].items() if k not in drop}} for r in records]


def _died() -> dict:
    """Return manifest fields of a run marked running whose launcher (on this host) is gone: status ``died``."""
    gone = {"pid": 2**22 + 12345, "started": 0.0, "host": socket.gethostname()}
    return {"status": "running", "attempts": [{"attempt": 0, "metrics": "metrics.jsonl", "status": "running",
                                               "launcher": gone}]}


def _data(root):
    return F.FigureData(logs.load_runs([root], progress=False), root / "mismatch")


def test_panels_come_from_the_registry(specs):
    assert N.panel_ids(specs, "fig1") == [f"fig1{c}" for c in "abcdefghijkl"]
    assert N.panel_ids(specs, "fig2") == [f"fig2{c}" for c in "abcdefghijkl"]
    fig3 = {(s.algorithm, a.label) for s, a in N.panel_arms(specs, "fig3")}
    assert fig3 == {("grpo", "bf16"), ("grpo_token_tis", "bf16"), ("grpo_seq_mis", "bf16"), ("gspo", "bf16"),
                    ("pg_seq_is", "fp16")}
    assert {a.label for _, a in N.panel_arms(specs, "fig4")} == {"fp16"}
    assert len(N.panel_arms(specs, "ablation")) == 9
    titles = [F.experiment_title(s) for s, _ in N.panel_arms(specs, "fig1h")]
    assert titles == ["LoRA GRPO-Token-TIS", "LoRA GRPO-Token-TIS"]  # both arms of one experiment


@pytest.mark.parametrize("scale", ["tiny", "paper"])
def test_without_runs_every_panel_says_why_and_every_figure_its_scale(tmp_path, scale):
    data = F.FigureData(logs.build_table([]), tmp_path / "mismatch")
    why = "not run yet — make grid EXP='" if scale == "tiny" else N.NEEDS_GPUS
    for name, build in F.FIGURES.items():
        fig = build(data, scale)
        assert P.scale_label(scale) in fig._suptitle.get_text(), name
        assert any(f"Scale: {P.scale_label(scale)}." in t.get_text() for t in fig.texts), name
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison and ax.get_title()]
        notes = [P.panel_note(ax) for ax in panels]
        if name not in RUN_FIGURES:  # offline mismatch results, not runs of the grid
            assert notes and all(n == P.NO_RUNS for n in notes), name
            continue
        curve_panels = [ax for ax in panels if not ax.get_title().startswith(("Final", "Median", "Validation set"))]
        assert curve_panels and all(why in " ".join(P.panel_texts(ax)) for ax in curve_panels), name
    assert P.scale_label("tiny") == "tiny scale (CPU)"


def test_seed_counts_for_one_and_three_seeds(tmp_path):
    rng = np.random.default_rng(0)
    for seed in (1, 7, 42):
        write_run(tmp_path, "tiny", "sanity/grpo", "fp16", seed, [_records(10, "fp16", rng)])
    for name in ("sanity/grpo", "sanity/grpo_seq_mis"):
        write_run(tmp_path, "tiny", name, "bf16", 42, [_records(10, "bf16", rng)])
    data = _data(tmp_path)

    for build in (F.build_fig1, F.build_fig2):  # per-panel notes: panels draw different runs
        fig = build(data, "tiny")
        grpo = next(ax for title, ax in _panels(fig).items() if title.endswith("Sanity GRPO"))
        assert P.panel_texts(grpo) == ["FP16: 3 seeds BF16: 1 seed"]
        seq_mis = next(ax for title, ax in _panels(fig).items() if title.endswith("Sanity GRPO-Seq-MIS"))
        assert "BF16: 1 seed" in P.panel_texts(seq_mis)[0]

    fig3 = F.build_fig3(data, "tiny")  # one legend for the row: every panel draws the same runs
    assert _legend(fig3) == ["BF16 GRPO: 1 seed", "BF16 GRPO-Seq-MIS: 1 seed"]
    fig4 = F.build_fig4(data, "tiny")
    assert _legend(fig4) == ["FP16 GRPO: 3 seeds"]
    assert all(P.panel_texts(ax) == [] for ax in fig4.axes[:3])  # nothing short of the legend

    ablation = F.build_ablation(data, "tiny")  # its uniform cells are sanity/grpo's runs
    assert _legend(ablation) == ["BF16: 1 seed", "FP16: 3 seeds"]
    reward_map = _panels(ablation)["Final training reward (trailing mean)"]
    cells = [t.get_text() for t in reward_map.texts]
    assert any(c.endswith("\n3 seeds") for c in cells) and any(c.endswith("\n1 seed") for c in cells)
    assert sum(c == "not run yet" for c in cells) == 7


def test_each_missing_arm_says_why(tmp_path):
    rng = np.random.default_rng(1)
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [_records(10, "fp16", rng)])
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42, [_records(6, "bf16", rng)], manifest=_died())
    write_run(tmp_path, "tiny", "sanity/gspo", "fp16", 42, [_records(4, "fp16", rng)], status="failed")
    write_run(tmp_path, "tiny", "sanity/grpo_seq_mis", "fp16", 42, [_records(10, "fp16", rng, drop=(M.REWARD,))])
    write_run(tmp_path, "tiny", "sanity/grpo_seq_mis", "bf16", 42, [_records(10, "bf16", rng)])
    data = _data(tmp_path)
    fig = F.build_fig1(data, "tiny")
    panels = _panels(fig)

    grpo = panels["(a) Sanity GRPO"]  # one arm draws, the other is noted
    assert P.panel_note(grpo) is None
    assert P.panel_texts(grpo) == ["FP16: 1 seed BF16: run unfinished (died)"]
    colors = {to_hex(line.get_color()) for line in grpo.get_lines()}
    assert colors == {P.PRECISION_COLORS["fp16"]}  # the died run is not drawn as if complete
    assert data.read == {("tiny", "sanity.grpo-fp16-s42"), ("tiny", "sanity.grpo_seq_mis-bf16-s42"),
                         ("tiny", "sanity.grpo_seq_mis-fp16-s42")}  # runs.json names the drawn runs only

    gspo = P.panel_texts(panels["(d) Sanity GSPO"])
    assert gspo == ["FP16: run unfinished (failed) BF16: not run yet — make grid EXP='sanity/gspo' PRECISION=bf16"
                    " SCALE=tiny"]
    assert P.panel_note(panels["(d) Sanity GSPO"]) is not None  # nothing drawn: the note spans the panel

    seq_mis = P.panel_texts(panels["(c) Sanity GRPO-Seq-MIS"])
    assert seq_mis == [f"BF16: 1 seed FP16: no data ({M.REWARD} not logged)"]

    fig2 = F.build_fig2(data, "tiny")
    assert "FP16: no data" not in " ".join(P.panel_texts(_panels(fig2)["(c) Sanity GRPO-Seq-MIS"]))

    fig3 = F.build_fig3(data, "tiny")  # row figures: what drew nowhere is said under the shared legend
    header = P.panel_texts(fig3)
    assert header == ["BF16 GRPO: run unfinished (died) BF16 GRPO-Token-TIS, BF16 GSPO, FP16 PG-Seq-IS: not run yet"
                      " — make grid EXP='sanity/grpo_token_tis sanity/gspo' PRECISION=bf16 SCALE=tiny"
                      " make grid EXP='sanity/pg_seq_is' PRECISION=fp16 SCALE=tiny"]
    assert _legend(fig3) == ["BF16 GRPO-Seq-MIS: 1 seed"]


def test_paper_scale_without_runs_needs_gpus(tmp_path):
    rng = np.random.default_rng(2)
    write_run(tmp_path, "paper", "sanity/grpo", "fp16", 42, [_records(10, "fp16", rng)])
    fig = F.build_fig1(_data(tmp_path), "paper")
    assert P.panel_texts(_panels(fig)["(a) Sanity GRPO"]) == [f"FP16: 1 seed BF16: {N.NEEDS_GPUS}"]
    assert P.panel_texts(_panels(fig)[f"(l) Dense-14B DAPO {F.ASSUMED_REWARD_MARK} {F.MEGATRON_MARK}"]) == \
        [f"FP16, BF16: {N.NEEDS_GPUS}"]
    assert N.NEEDS_GPUS == "not run (paper scale needs GPUs)"


def test_a_row_panel_notes_an_arm_short_of_its_legend(tmp_path):
    rng = np.random.default_rng(3)
    for seed in (1, 7):
        write_run(tmp_path, "tiny", "sanity/grpo", "bf16", seed, [_records(10, "bf16", rng)])
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42, [_records(10, "bf16", rng, drop=(M.PROBS_DIFF_ABS_MEAN,))])
    fig = F.build_fig3(_data(tmp_path), "tiny")
    assert _legend(fig)[0] == "BF16 GRPO: 3 seeds"
    assert P.panel_texts(_panels(fig)["Mean[Abs(π − μ)]"]) == ["BF16 GRPO: 2 of 3 seeds"]
    assert P.panel_texts(_panels(fig)["Rewards"]) == []


def test_the_not_run_yet_command_is_one_make_grid_accepts(tmp_path):
    data = F.FigureData(logs.build_table([]), tmp_path / "mismatch")
    checked = 0
    for build, scale in ((F.build_fig1, "tiny"), (F.build_fig3, "tiny"), (F.build_ablation, "tiny")):
        fig = build(data, scale)
        for ax in fig.axes:
            for text in P.panel_texts(ax):
                for match in re.finditer(r"make grid EXP='([^']*)'(?: PRECISION=(\S+))? SCALE=(\w+)", text):
                    # the Makefile passes each word of EXP to the grid command, quoted: $(foreach e,$(EXP),'$(e)')
                    only = ["--precision", match[2]] if match[2] else []
                    args = build_parser().parse_args(["grid", *match[1].split(), *only, "--scale", match[3],
                                                      "--dry-run"])
                    args.overrides = []
                    _, selected, _ = _decide_and_select(args)
                    assert {spec.name for spec, _ in selected} == set(match[1].split()), text
                    checked += 1
    assert checked >= 12 + 6 + 2


def test_colours_and_styles_follow_the_paper(tmp_path):
    assert P.PRECISION_COLORS["bf16"] == "#1f77b4" and P.PRECISION_COLORS["fp16"] == "#2ca02c"  # tab10 blue, green
    assert list(P.ALGORITHM_COLORS)[:5] == ["grpo", "grpo_token_tis", "grpo_seq_mis", "gspo", "pg_seq_is"]
    rng = np.random.default_rng(4)
    for precision in ("fp16", "bf16"):
        write_run(tmp_path, "tiny", "sanity/grpo", precision, 42, [_records(20, precision, rng)])
    data = _data(tmp_path)
    reward = F.build_fig1(data, "tiny").axes[0]
    for precision in ("fp16", "bf16"):
        lines = [ln for ln in reward.get_lines() if to_hex(ln.get_color()) == P.PRECISION_COLORS[precision]]
        raw, smooth = sorted(lines, key=lambda ln: ln.get_linewidth())
        assert raw.get_alpha() == P.RAW_ALPHA and smooth.get_alpha() is None  # faint raw, bold smoothed
        assert smooth.get_linewidth() > 2 * raw.get_linewidth()
    evaluation = F.build_fig2(data, "tiny").axes[0]
    for line in evaluation.get_lines():
        assert line.get_marker() == "o" and len(line.get_xdata()) == 5  # points at steps 1, 5, 10, 15, 20: unsmoothed
    fig3 = F.build_fig3(data, "tiny")
    colors = {to_hex(ln.get_color()) for ln in fig3.axes[0].get_lines()}
    assert colors == {to_hex(P.ALGORITHM_COLORS["grpo"])}


def test_draw_figure_rejects_unknown_names(tmp_path):
    from precision_rl.errors import UserError

    data = F.FigureData(logs.build_table([]), tmp_path)
    with pytest.raises(UserError, match="unknown figure"):
        F.draw_figure(data, "fig9", "tiny", tmp_path / "x.png")
    with pytest.raises(UserError, match="unknown scale"):
        F.draw_figure(data, "fig1_training_reward", "huge", tmp_path / "x.png")


def test_fork_ablation_draws_both_settings_in_both_precisions(tmp_path, specs):
    assert {(s.name, a.label) for s, a in N.panel_arms(specs, F.FORK_ABLATION_PANEL)} == {
        (name, arm) for name in ("sanity/grpo", "ablation/fork_changes") for arm in ("fp16", "bf16")}
    steps = range(1, 11)
    for name in ("sanity/grpo", "ablation/fork_changes"):
        write_run(tmp_path, "tiny", name, "bf16", 1,
                  [[{"step": s, "data": {M.REWARD: 0.5 + s / 40, M.TOKEN_KL_K3: 1e-5}} for s in steps]])
    fig = F.build_fork_ablation(_data(tmp_path), "tiny")
    reward = fig.axes[0]
    assert P.panel_note(reward) is None
    styles = {line.get_label(): line.get_linestyle() for line in reward.get_lines()
              if not line.get_label().startswith("_")}
    assert styles.get("BF16 (fork settings)") == "-" and styles.get("BF16 (verl defaults)") == "--", styles
    assert sorted(_legend(fig)) == ["BF16 (fork settings): 1 seed", "BF16 (verl defaults): 1 seed"]


def test_grid_command():
    assert N.grid_command(["sanity/gspo", "sanity/gspo"], "tiny") == "make grid EXP='sanity/gspo' SCALE=tiny"
    assert N.grid_command(["sanity/pg_seq_is", "sanity/gspo"], "paper") == \
        "make grid EXP='sanity/gspo sanity/pg_seq_is' SCALE=paper"


def test_the_grid_commands_of_a_note_run_its_arms_and_no_other(specs):
    def arm(name: str, label: str) -> N.ArmRuns:
        spec = specs[name]
        return N.ArmRuns(spec, spec.arm(label), label.upper(), (), ())

    whole = [arm("sanity/gspo", "fp16"), arm("sanity/gspo", "bf16")]
    assert N.grid_commands(whole, "tiny") == ["make grid EXP='sanity/gspo' SCALE=tiny"]
    mixed = [*whole, arm("sanity/pg_seq_is", "fp16"), arm("ladder/synthetic_s3_gspo", "fp16"),
             arm("sanity/grpo_token_tis", "bf16")]
    assert N.grid_commands(mixed, "tiny") == [
        "make grid EXP='ladder/synthetic_s3_gspo sanity/gspo' SCALE=tiny",
        "make grid EXP='sanity/grpo_token_tis' PRECISION=bf16 SCALE=tiny",
        "make grid EXP='sanity/pg_seq_is' PRECISION=fp16 SCALE=tiny"]


def test_an_arm_whose_kl_is_rounding_noise_around_zero_says_so_not_that_it_was_not_logged(tmp_path):
    rng = np.random.default_rng(3)
    records = _records(10, "fp32", rng)
    for r in records:  # FP32 against FP32: the logged estimates sit at or just below 0
        r["data"].update({M.TOKEN_KL_K3: -9e-10, M.TOKEN_KL_K1: -6e-8})
    write_run(tmp_path, "tiny", "ablation/precision", "fp32", 42, [records])
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42, [_records(10, "bf16", rng)])
    fig = F.build_ablation(_data(tmp_path), "tiny")
    kl_panel = next(ax for ax in fig.axes if ax.get_title() == M.TOKEN_KL_Q.label)
    assert P.panel_texts(kl_panel) == [f"FP32: {M.TOKEN_KL_Q.label} ≤ 0 throughout (log scale)"]


def test_fig3_draws_the_k1_estimator_beside_k3(tmp_path):
    rng = np.random.default_rng(5)
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42, [_records(10, "bf16", rng, drop=(M.TOKEN_KL_K3,))])
    panels = _panels(F.build_fig3(_data(tmp_path), "tiny"))
    k3, k1 = panels["KL[μ‖π] per token, k3"], panels["KL[μ‖π] per token, k1 (oat's)"]
    assert k3.get_lines() == [] and P.panel_texts(k3)[0].startswith("BF16 GRPO: no data (KL[μ‖π] per token, k3 not")
    assert k1.get_lines() and k1.get_yscale() == "symlog"


def test_panels_whose_reward_is_assumed_say_so(specs, tmp_path):
    fig = F.build_fig1(F.FigureData(logs.build_table([]), tmp_path / "mismatch"), "paper")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    marked = [t for t in titles if F.ASSUMED_REWARD_MARK in t]
    assert [t.split(")")[0] for t in marked] == ["(i", "(j", "(k", "(l"]
    assert {s.family for s in specs.values() if s.reward_assumed} == {"moe", "dense14b"}


def test_megatron_panels_say_they_log_no_fp16_loss_scale_at_paper_scale_only(specs, tmp_path):
    data = F.FigureData(logs.build_table([]), tmp_path / "mismatch")
    paper = F.build_fig1(data, "paper")
    megatron = [ax.get_title().split(")")[0] for ax in paper.axes if ax.get_title().endswith(F.MEGATRON_MARK)]
    assert megatron == ["(i", "(j", "(k", "(l"]
    assert {s.family for s in specs.values() if s.paper_backend == "megatron"} == {"moe", "dense14b"}
    caption = " ".join(t.get_text() for t in paper.texts).replace("\n", " ")
    assert "precision/loss_scale" in caption and "FSDP engine only" in caption
    tiny = F.build_fig1(data, "tiny")
    assert F.MEGATRON_MARK not in " ".join(t.get_text() for t in tiny.texts) + " ".join(a.get_title() for a in tiny.axes)


def test_a_tiny_grid_draws_only_the_panels_with_runs_of_its_profile_and_names_the_rest(tmp_path):
    rng = np.random.default_rng(3)
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [_records(10, "fp16", rng)])
    write_run(tmp_path, "tiny", "sanity/gspo", "fp16", 42, [_records(10, "fp16", rng)],
              manifest={"profile": {"name": "quick", "stop_after_step": 25}})
    table = logs.load_runs([tmp_path], progress=False)
    calibrated = F.build_fig1(F.FigureData(table, tmp_path / "mismatch"), "tiny")
    assert list(_panels(calibrated)) == ["(a) Sanity GRPO"]
    notes = " ".join(t.get_text() for t in calibrated.texts)
    assert "Not drawn: (b) Sanity GRPO-Token-TIS" in notes and "(l) Dense-14B DAPO" in notes
    assert "; (d) has quick-profile runs, drawn in this figure's quick-profile version" in notes.replace("\n", " ")
    assert "calibrated profile" in calibrated._suptitle.get_text()
    assert "instrument: shipped model" in notes
    quick = F.build_fig1(F.FigureData(table, tmp_path / "mismatch", profile="quick"), "tiny")
    # the calibrated GRPO run stands in for its seed's quick run, drawn to the quick steps
    assert list(_panels(quick)) == ["(a) Sanity GRPO", "(d) Sanity GSPO"] and "quick profile" in quick._suptitle.get_text()
    caption = " ".join(t.get_text() for t in quick.texts).replace("\n", " ")
    assert "calibrated runs drawn to step 25 stand in for the quick runs of their seeds" in caption
    assert "stand in" not in notes.replace("\n", " ")


def test_a_tiny_figure_names_the_cpu_kinds_of_the_runs_it_draws(tmp_path):
    rng = np.random.default_rng(5)
    zen4 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1",
            "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}
    avx2 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 1 stepping 1", "matrix_flags": ["avx2"]}
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [_records(10, "fp16", rng)], manifest={"hardware": zen4})
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42, [_records(10, "bf16", rng)], manifest={"hardware": avx2})
    write_run(tmp_path, "tiny", "ladder/synthetic_s3", "fp16", 42, [_records(10, "fp16", rng)],
              manifest={"hardware": {"cpu_model": "Intel Xeon", "matrix_flags": ["amx_tile"]}})
    fig = F.build_fig1(F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch"), "tiny")
    notes = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "runs on AMD EPYC (AuthenticAMD family 25 model 1) [avx2] and AMD EPYC (AuthenticAMD family 25 model 17)" \
        in notes
    assert "Intel" not in notes, "a run the figure does not draw names no CPU"


def test_a_smoke_run_is_never_a_point_of_a_paper_scale_curve(tmp_path):
    from precision_rl.config.precision import PrecisionArm

    rng = np.random.default_rng(3)
    write_run(tmp_path, "paper", "sanity/grpo", "fp16", 42, [run_records(10, "fp16", rng, n_metrics=0)])
    write_run(tmp_path, "paper", "sanity/grpo", "fp16", 7, [run_records(10, "fp16", rng, n_metrics=0)],
              manifest={"run_name": "sanity.grpo-fp16-smoke-s7", "profile": {"name": "smoke", "stop_after_step": None}})
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    assert data.runs("paper", "sanity/grpo", PrecisionArm("fp16", "fp16")) == ["sanity.grpo-fp16-s42"]
