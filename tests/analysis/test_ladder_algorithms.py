"""The ladder's Fig. 1: each of the paper's Fig. 1 algorithms at the ladder's strongest synthetic dose, with its
control and its rollout in the trainer's format, judged by the bands rule against its no-mismatch arm."""

import pytest

from precision_rl import metrics as M
from precision_rl.analysis import figures as F
from precision_rl.analysis import logs
from precision_rl.analysis import plotting as P
from precision_rl.analysis.ladder import RunDose, Rung
from precision_rl.analysis.ladder_algorithms import (
    CLEAN,
    CONTROL,
    PANEL_PREFIX,
    RUNG,
    AlgorithmArms,
    algorithm_panels,
    arm_role,
    verdicts,
)
from precision_rl.analysis.panel_notes import panel_arms, panel_ids
from precision_rl.analysis.synthetic import write_run
from precision_rl.config.registry import load_all

QUICK = {"profile": {"name": "quick", "stop_after_step": 25}}
FIG1_ALGORITHMS = ["grpo", "grpo_token_tis", "grpo_seq_mis", "gspo", "pg_seq_is", "pg_seq_mis"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    P.plt.close("all")


def test_each_fig1_algorithm_has_its_rung_its_control_and_its_fp16_sanity_arm_at_the_strongest_dose():
    specs = load_all()
    panels = panel_ids(specs, PANEL_PREFIX)
    assert panels == [f"{PANEL_PREFIX}{c}" for c in "abcdef"]
    for panel, algorithm in zip(panels, FIG1_ALGORITHMS, strict=True):
        roles = {arm_role(spec, arm): (spec, arm) for spec, arm in panel_arms(specs, panel)}
        assert set(roles) == {CLEAN, RUNG, CONTROL} and len(panel_arms(specs, panel)) == 3, panel
        clean, rung, control = roles[CLEAN][0], roles[RUNG][0], roles[CONTROL][0]
        assert clean.name == f"sanity/{algorithm}" and roles[CLEAN][1].label == "fp16"
        assert {rung.algorithm, control.algorithm} == {algorithm}
        assert (rung.hyper.rollout_logit_noise, control.hyper.rollout_logit_noise) == (3.0, 3.0)
        assert (rung.hyper.logit_noise_in_trainer, control.hyper.logit_noise_in_trainer) == (None, True)
        # the algorithm's own settings come with it (e.g. its IS threshold, GSPO's clip range)
        for field in ("is_threshold", "clip_ratio_low", "clip_ratio_high", "loss_agg_mode"):
            assert getattr(rung.hyper, field) == getattr(clean.hyper, field) == getattr(control.hyper, field), \
                (panel, field)
        assert [a.label for a in rung.arms] == [a.label for a in control.arms] == ["fp16"]


def _rung(rewards: list[float], noise: float = 3.0, control: bool = False) -> Rung:
    return Rung("x", "fp16", tuple(RunDose(f"r{k}", 9.0, r, None, None) for k, r in enumerate(rewards)), noise,
                control)


def _panel(rung: list[float], control: list[float], clean: list[float] = (0.8, 0.81, 0.82),
           algorithm: str = "grpo_token_tis") -> AlgorithmArms:
    return AlgorithmArms(algorithm, algorithm, {}, {CLEAN: _rung(list(clean), 0.0), RUNG: _rung(rung),
                                     CONTROL: _rung(control, control=True)})


def test_without_a_degraded_grpo_each_algorithm_reads_degraded_or_no_effect_against_its_control():
    panels = {"ladder_fig1a": _panel([0.40, 0.42, 0.43], [0.41, 0.42, 0.44], algorithm="grpo"),
              "ladder_fig1b": _panel([0.30, 0.31, 0.32], [0.41, 0.42, 0.44]),
              "ladder_fig1c": _panel([0.30], [0.41, 0.42, 0.44])}
    out = verdicts(panels)
    assert out["ladder_fig1a"] == "no effect resolved (reward -0.007 against its control)"
    assert out["ladder_fig1b"] == "degraded (reward -0.113 against its control)"
    assert out["ladder_fig1c"] == "no band yet, one seed on a side (reward -0.123 against its control)"


def test_with_grpo_degraded_each_algorithm_recovers_partly_or_not():
    control = [0.60, 0.61, 0.62]
    panels = {"ladder_fig1a": _panel([0.30, 0.31, 0.32], control, algorithm="grpo"),  # 0.30 below its control
              "ladder_fig1b": _panel([0.60, 0.62, 0.64], control),
              "ladder_fig1c": _panel([0.50, 0.52, 0.54], control),
              "ladder_fig1d": _panel([0.40, 0.41, 0.42], control),
              "ladder_fig1e": _panel([], control),
              "ladder_fig1f": _panel([0.62], control)}  # above its control, but one seed: not "recovers"
    out = verdicts(panels)
    assert out["ladder_fig1a"] == "degraded (reward -0.300 against its control)"
    assert out["ladder_fig1b"] == "recovers (reward +0.010 against its control)"
    assert out["ladder_fig1c"] == "partly (reward -0.090 against its control; GRPO -0.300)"
    assert out["ladder_fig1d"].startswith("not (reward -0.200")
    assert out["ladder_fig1e"] == "no verdict: the rung or its control has no finished run"
    assert out["ladder_fig1f"].startswith("no band yet, one seed on a side")


def test_a_real_rung_without_a_control_is_judged_against_the_rollout_in_the_trainers_format():
    real = AlgorithmArms("grpo", "GRPO", {}, {CLEAN: _rung([0.80, 0.81, 0.82], 0.0), RUNG: _rung([0.5, 0.6, 0.7], 0.0)})
    assert real.reference_role() == CLEAN
    assert verdicts({"ladder_fig1a": real})["ladder_fig1a"] == "degraded (reward -0.210 against its trainer's format)"


def _records(steps: int, reward: float) -> list[dict]:
    return [{"step": s, "data": {M.REWARD: reward - 0.2 / s, M.SEQUENCE_KL_K3: 1.0,
                                 "val-core/tiny_sanity_val/acc/mean@4": reward - 0.1}} for s in range(1, steps + 1)]


def test_the_figure_draws_each_algorithm_with_its_arms_and_says_which_have_not_run(tmp_path):
    for seed, shift in ((42, 0.0), (1, 0.01)):
        write_run(tmp_path, "tiny", "sanity/grpo", "fp16", seed, [_records(300, 0.9 + shift)])  # calibrated
        write_run(tmp_path, "tiny", "ladder/synthetic_s3", "fp16", seed, [_records(25, 0.4 + shift)], manifest=QUICK)
        write_run(tmp_path, "tiny", "ladder/synthetic_s3_control", "fp16", seed, [_records(25, 0.405 + shift)],
                  manifest=QUICK)
    write_run(tmp_path, "tiny", "ladder/synthetic_s3_gspo", "fp16", 42, [_records(25, 0.3)], algorithm="gspo",
              manifest=QUICK)
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    quick = data.with_profile("quick")
    panels = algorithm_panels(quick, "tiny")
    assert [p.title for p in panels.values()] == ["GRPO", "GRPO-Token-TIS", "GRPO-Seq-MIS", "GSPO", "PG-Seq-IS",
                                                  "PG-Seq-MIS"]
    grpo = panels["ladder_fig1a"]
    assert {role: len(arm.finished) for role, arm in grpo.arms.items()} == {CLEAN: 2, RUNG: 2, CONTROL: 2}
    fig = F.build_ladder_algorithms(quick, "tiny")
    first = fig.axes[0]
    assert first.get_title() == "(a) GRPO" and "Verdict: no effect resolved" in " ".join(P.panel_texts(first))
    assert max(max(line.get_xdata()) for line in first.get_lines()) == 25  # the calibrated run cut to the profile
    assert len([line for line in first.get_lines() if line.get_linestyle() == "--"]) == 2  # the control: raw + EMA
    gspo = fig.axes[3]
    assert gspo.get_ylim() == first.get_ylim() and first.get_ylim()[0] < 0.3 - 0.2  # one scale: GSPO's low start
    notes = " ".join(P.panel_texts(gspo))
    assert "not run yet" in notes and "ladder/synthetic_s3_gspo_control" in notes
    assert "make grid EXP='sanity/gspo' PRECISION=fp16 SCALE=tiny" in notes  # the FP16 fix, not sanity's BF16 arm
    assert "tiny scale (CPU)" in fig._suptitle.get_text()


def test_at_paper_scale_the_synthetic_arms_say_they_run_at_tiny_scale_only(tmp_path):
    write_run(tmp_path, "tiny", "ladder/synthetic_s3", "fp16", 42, [_records(25, 0.4)], manifest=QUICK)
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    fig = F.build_ladder_algorithms(data, "paper")
    notes = " ".join(P.panel_texts(fig.axes[0]))
    assert "trainer's format: not run (paper scale needs GPUs)" in notes
    assert "degrading rung, control: runs at tiny scale only" in notes
