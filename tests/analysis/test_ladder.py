"""The mismatch ladder's dose–response: each run's dose is the per-sequence KL it logged, a rung degrades by the bands
rule against the rung in the trainer's format, and the figure draws quick-profile runs, calibrated runs standing in
for a seed's quick run."""

import pytest
from matplotlib.collections import PathCollection

from precision_rl import metrics as M
from precision_rl.analysis import figures as F
from precision_rl.analysis import logs
from precision_rl.analysis import plotting as P
from precision_rl.analysis.ladder import LADDERS, RunDose, Rung, derived_sequence_kl, ladder_arms, ladder_rungs, verdict
from precision_rl.analysis.synthetic import write_run

QUICK = {"profile": {"name": "quick", "stop_after_step": 25}}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    P.plt.close("all")


def _records(steps: int, reward: float, sequence_kl: float) -> list[dict]:
    return [{"step": s, "data": {M.REWARD: reward - 0.2 / s, M.SEQUENCE_KL_K3: sequence_kl * (1 + 0.01 * s),
                                 M.PROBS_DIFF_ABS_MAX: 0.1, "val-core/tiny_sanity_val/acc/mean@4": reward - 0.1}}
            for s in range(1, steps + 1)]


def _rung(label: str, rewards: list[float], dose: float, noise: float = 0.0, control: bool = False) -> Rung:
    return Rung(label, label, tuple(RunDose(f"{label}-{k}", dose, r, None, None) for k, r in enumerate(rewards)),
                noise, control)


def test_a_rung_degrades_only_where_its_band_lies_wholly_below_the_reference_s():
    reference = _rung("FP16", [0.80, 0.82, 0.84], 1e-3)
    assert verdict([reference, _rung("fp8", [0.79, 0.81, 0.83], 0.05), _rung("fp4", [0.70, 0.72, 0.80], 0.3)]) \
        == "no degradation resolved up to 0.3 nats per sequence (fp4)"
    assert verdict([reference, _rung("fp4", [0.60, 0.70, 0.75], 0.3), _rung("fp8", [0.50, 0.55, 0.79], 0.05)]) \
        == "degrades from 0.05 nats per sequence (fp8)"
    assert "one seed only: fp4 (no band)" in verdict([reference, _rung("fp4", [0.1], 0.3)])
    # a one-seed rung resolves nothing, so "up to" stops at the largest dose that has a band
    assert verdict([reference, _rung("fp8", [0.79, 0.81, 0.83], 0.05), _rung("fp4", [0.81], 0.3)]) \
        == "no degradation resolved up to 0.05 nats per sequence (fp8); one seed only: fp4 (no band)"
    assert verdict([_rung("FP16", [], 1e-3)]).startswith("no verdict")


def test_a_synthetic_rung_is_judged_against_its_control_not_against_the_clean_rung():
    reference = _rung("FP16", [0.80, 0.82, 0.84], 1e-5)
    worse_sampler = [_rung("s2", [0.60, 0.62, 0.64], 2.0, noise=2), _rung("s2c", [0.61, 0.63, 0.65], 1e-5, 2, True)]
    # one real rung, the noise-free reference of an algorithm's own ladder: nothing to judge it against
    assert verdict([reference, *worse_sampler]) == ("synthetic: no degradation against the controls resolved up to "
                                                    "2 nats per sequence (σ = 2)")
    mismatch = [_rung("s3", [0.40, 0.45, 0.50], 8.0, noise=3), _rung("s3c", [0.55, 0.60, 0.62], 1e-5, 3, True)]
    assert verdict([reference, *worse_sampler, *mismatch]).endswith(
        "synthetic: degrades against its control from 8 nats per sequence (σ = 3)")
    assert verdict([reference, _rung("s4", [0.1, 0.2], 20.0, noise=4)]).endswith(
        "synthetic: no rung with a finished control")
    unbanded = [_rung("s4", [0.60], 20.0, noise=4), _rung("s4c", [0.61], 1e-5, 4, True)]
    assert verdict([reference, *worse_sampler, *unbanded]) == (
        "synthetic: no degradation against the controls resolved up to 2 nats per sequence (σ = 2); one seed only: "
        "s4, s4c (no band)")


def test_the_ladder_figure_places_each_run_at_its_logged_dose_and_a_calibrated_run_stands_in_to_the_quick_steps(
        tmp_path):
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [_records(300, 0.95, 1e-3)])  # calibrated
    write_run(tmp_path, "tiny", "ladder/grpo", "train_fp16-infer_fp4_e2m1", 42, [_records(25, 0.7, 0.4)],
              manifest=QUICK)
    write_run(tmp_path, "tiny", "ladder/grpo", "train_fp16-infer_fp8_e4m3", 42, [_records(25, 0.9, 0.05)],
              manifest={"profile": {"name": "calibrated"}, "status": "running"})
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    quick = data.with_profile("quick")
    rungs = {r.label: r for r in ladder_rungs(quick, "tiny")}
    assert list(rungs)[:2] == ["FP16", "train FP16 / infer BF16"]  # finest format first
    fp16 = rungs["FP16"].runs[0]
    assert fp16.sequence_kl == pytest.approx(1e-3 * (1 + 0.01 * 13))  # median of steps 1-25 only
    assert rungs["train FP16 / infer MXFP4"].runs[0].final_reward < fp16.final_reward
    assert rungs["train FP16 / infer FP8 E4M3"].runs == ()  # unfinished
    fig = F.build_mismatch_ladder(quick, "tiny")
    scatter = fig.axes[0]
    points = [c for c in scatter.collections if isinstance(c, PathCollection)]
    assert scatter.get_xscale() == "log" and len(points) == 2
    xs = sorted(x for c in points for x, _ in c.get_offsets())
    assert xs[0] == pytest.approx(fp16.sequence_kl) and xs[-1] == pytest.approx(0.4 * 1.13)
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "Verdict" in texts and "one seed only" in texts and "quick profile" in fig._suptitle.get_text()
    curve_steps = max(max(line.get_xdata()) for line in fig.axes[-1].get_lines())
    assert curve_steps == 25
    assert {"tiny"} == {s for s, _ in quick.read}


def test_draw_figure_draws_the_ladder_in_the_quick_profile_whatever_the_data_s(tmp_path):
    write_run(tmp_path, "tiny", "ladder/grpo", "train_fp16-infer_fp4_e2m1", 42, [_records(25, 0.7, 0.4)],
              manifest=QUICK)
    data = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch")
    png, _ = F.draw_figure(data, "effect_mismatch_ladder", "tiny", tmp_path / "fig" / "tiny" / "ladder.png")
    assert png.is_file()
    assert data.profile == "calibrated"


def test_a_run_logged_before_the_per_sequence_kl_takes_its_dose_from_the_token_k3_times_the_mean_length(tmp_path):
    old = [{"step": s, "data": {M.REWARD: 0.8, M.TOKEN_KL_K3: 1e-7 * s, M.RESPONSE_LENGTH: 40.0,
                                M.PROBS_DIFF_ABS_MAX: 0.1}} for s in range(1, 301)]
    write_run(tmp_path, "tiny", "sanity/grpo", "fp16", 42, [old])  # calibrated, no per-sequence KL
    write_run(tmp_path, "tiny", "ladder/grpo", "train_fp16-infer_fp4_e2m1", 42, [_records(25, 0.7, 0.4)],
              manifest=QUICK)
    quick = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch").with_profile("quick")
    rungs = {r.label: r for r in ladder_rungs(quick, "tiny")}
    fp16, fp4 = rungs["FP16"].runs[0], rungs["train FP16 / infer MXFP4"].runs[0]
    assert fp16.derived_dose and not fp4.derived_dose
    assert fp16.sequence_kl == pytest.approx(1e-7 * 13 * 40.0)  # the median of steps 1-25, per sequence
    markers = {c.get_paths()[0].vertices.shape[0] for c in F.build_mismatch_ladder(quick, "tiny").axes[0].collections
               if isinstance(c, PathCollection)}
    assert len(markers) == 2  # the derived dose drawn with its own marker


def test_the_derived_dose_is_none_without_both_series():
    import pandas as pd

    assert derived_sequence_kl(None, pd.Series([40.0])) is None
    assert derived_sequence_kl(pd.Series([1e-6, 2e-6], index=[1, 2]), pd.Series([40.0], index=[2])).tolist() == \
        [pytest.approx(8e-5)]


# verl 0.9.1 logs its token k3 (rollout_corr/k3_kl, verl.trainer.ppo.rollout_corr_helper.compute_offpolicy_metrics) as
# fp32 exp(x) - x - 1, which cancels below ~1e-6 nats per token and reads low there; the suite's own per-sequence k3
# (precision_rl.verl_ext.mismatch_metrics.sequence_kl) takes expm1(x) - x.
VERL_K3_EXACT_FROM = 1e-6


def test_verls_fp32_k3_reads_low_only_below_a_micro_nat_per_token():
    import torch

    generator = torch.Generator().manual_seed(0)
    for spread, low_by in ((5e-4, (0.01, 0.06)), (1.5e-3, (0.0, 0.003)), (5e-3, (-1e-4, 1e-4))):
        x = (torch.randn(40_000, generator=generator, dtype=torch.float64) * spread).float()
        exact = float((torch.expm1(x.double()) - x.double()).mean())
        verl = float((torch.exp(x) - x - 1).double().mean())
        ours = float((torch.expm1(x) - x).double().mean())
        assert abs(ours / exact - 1) < 1e-5
        assert low_by[0] <= 1 - verl / exact <= low_by[1], (spread, exact, verl)
        assert (exact >= VERL_K3_EXACT_FROM) == (spread > 1e-3)


def test_on_the_published_runs_the_derived_dose_matches_the_logged_one():
    """The identity experiments/ladder/README.md#what-a-run-measures states, on every committed run logging both:
    within 0.3 % where verl's token k3 is exact, and reading at most 5 % low below that."""
    import numpy as np

    from precision_rl.paths import LOGS_DIR

    exact, cancelled = [], []
    for run_dir in logs.find_run_dirs(LOGS_DIR / "tiny"):
        table = logs.build_table([logs.load_run_dir(run_dir)]).metrics
        wide = table.pivot_table(index="step", columns="metric", values="value", observed=True)
        if {M.SEQUENCE_KL_K3, M.TOKEN_KL_K3, M.RESPONSE_LENGTH} <= set(wide.columns):
            derived = derived_sequence_kl(wide[M.TOKEN_KL_K3], wide[M.RESPONSE_LENGTH])
            ratio = wide[M.SEQUENCE_KL_K3] / derived
            large = wide[M.TOKEN_KL_K3] >= VERL_K3_EXACT_FROM
            exact.append(ratio[large].dropna().to_numpy())
            cancelled.append(ratio[~large].dropna().to_numpy())
    assert len(exact) >= 12
    exact, cancelled = np.concatenate(exact), np.concatenate(cancelled)
    assert len(exact) and exact.min() > 0.999 and exact.max() < 1.003
    assert len(cancelled) and cancelled.min() > 0.999 and cancelled.max() < 1.05


def test_results_readme_gives_the_fp16_rungs_derived_doses_the_published_logs_give():
    from precision_rl.paths import LOGS_DIR, REPO_ROOT

    quick = F.FigureData(logs.load_runs([LOGS_DIR], progress=False), LOGS_DIR / "mismatch").with_profile("quick")
    fp16 = next(r for r in ladder_rungs(quick, "tiny") if r.label == "FP16")
    assert all(run.derived_dose for run in fp16.runs)
    doses = {run.run.rsplit("-s", 1)[1]: f"{run.sequence_kl:.2g}" for run in fp16.runs}
    stated = f"{doses['7']}, {doses['1']} and {doses['42']} nats per sequence".replace("e-06", "e-6").replace("e-05", "e-5")
    assert stated in " ".join((REPO_ROOT / "results" / "README.md").read_text().split())


def test_pg_seq_is_has_its_own_ladder_of_its_sanity_arm_and_its_noised_rungs_beside_their_controls(tmp_path):
    write_run(tmp_path, "tiny", "sanity/pg_seq_is", "fp16", 42, [_records(25, 0.8, 1e-4)], manifest=QUICK)
    write_run(tmp_path, "tiny", "ladder/synthetic_s3", "fp16", 42, [_records(25, 0.4, 12.0)], manifest=QUICK)
    for seed in (42, 1):
        write_run(tmp_path, "tiny", "ladder/synthetic_s3_pg_seq_is", "fp16", seed, [_records(25, 0.2 + seed / 1e3, 13.0)],
                  manifest=QUICK)
        write_run(tmp_path, "tiny", "ladder/synthetic_s3_pg_seq_is_control", "fp16", seed,
                  [_records(25, 0.4 + seed / 1e3, 3e-4)], manifest=QUICK)
    quick = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch").with_profile("quick")
    ladder = LADDERS["effect_ladder_pg_seq_is"]
    arms = ladder_arms(quick, "tiny", ladder.panel)
    assert {a.spec.name for a in arms} == {"sanity/pg_seq_is", *(f"ladder/synthetic_s{s}_pg_seq_is{c}"
                                                                  for s in ("0p5", "0p7", 1, "1p5", 2, 3)
                                                                  for c in ("", "_control"))}
    assert "ladder/synthetic_s3" not in {a.spec.name for a in arms}  # GRPO's rung feeds GRPO's ladder only
    fig = F.build_mismatch_ladder(quick, "tiny", ladder)
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "against each strength's control" in texts and "degrades against its control from" in texts
    assert fig._suptitle.get_text().startswith(ladder.title)


def test_the_ladder_figure_draws_each_rung_s_dose_per_step_on_a_log_scale(tmp_path):
    rising = [{"step": s, "data": {M.REWARD: 0.7, M.SEQUENCE_KL_K3: 0.1 * s, M.PROBS_DIFF_ABS_MAX: 0.1}}
              for s in range(1, 26)]
    write_run(tmp_path, "tiny", "ladder/grpo", "train_fp16-infer_fp4_e2m1", 42, [rising], manifest=QUICK)
    quick = F.FigureData(logs.load_runs([tmp_path], progress=False), tmp_path / "mismatch").with_profile("quick")
    dose = F.build_mismatch_ladder(quick, "tiny").axes[-2]
    assert dose.get_title() == "Dose per step" and dose.get_yscale() == "log"
    raw = [line for line in dose.get_lines() if len(line.get_xdata()) == 25]
    assert raw and list(raw[0].get_ydata()) == pytest.approx([0.1 * s for s in range(1, 26)])
    assert sorted(line.get_ydata()[0] for line in dose.get_lines() if len(line.get_xdata()) == 2) == [0.32, 7.64]
