"""`benchmarks/bench_vllm_gemm.py`'s step cost of a quantized rollout: generation's share of a quick-profile step is
read from the committed FP16 GRPO runs of the nearest CPU kind, and the weight re-quantization is timed on the shipped
model."""

import pytest

from precision_rl import metrics as M
from precision_rl import paths
from precision_rl.analysis.synthetic import write_run
from precision_rl.config.registry import load_experiment
from precision_rl.launch.runs import hardware


def _steps(last: int, gen_s: float, step_s: float) -> list[dict]:
    return [{"step": s, "data": {M.STEP_TIME: step_s, M.TIMING_PREFIX + "gen": gen_s}} for s in range(1, last + 1)]


def test_the_generation_share_comes_from_the_quick_steps_of_the_nearest_cpu_kind(tmp_path, monkeypatch, load_benchmark):
    bench = load_benchmark("bench_vllm_gemm")
    monkeypatch.setenv(paths.REFERENCE_ENV, str(tmp_path / "reference"))
    monkeypatch.setenv(paths.LOGS_ENV, str(tmp_path / "logs"))
    monkeypatch.setenv(paths.CALIBRATION_ENV, str(tmp_path / "calibration"))
    assert bench.quick_step_shares(hardware()) == {}  # nothing committed: no estimate
    experiment, arm = bench.STEP_COST_REFERENCE
    last = load_experiment(experiment, "tiny").quick_steps
    here = hardware()
    other = dict(here, cpu_id="GenuineIntel family 6 model 143 stepping 8", matrix_flags=["amx_bf16", "avx512_fp16"])
    write_run(tmp_path / "logs", "tiny", experiment, arm, 42, [_steps(last, 30.0, 100.0)], manifest={"hardware": here})
    write_run(tmp_path / "logs", "tiny", experiment, arm, 1, [_steps(last, 10.0, 100.0)], manifest={"hardware": other})
    write_run(tmp_path / "logs", "tiny", experiment, arm, 7, [_steps(last - 1, 90.0, 100.0)],
              manifest={"hardware": here})  # stops before the quick profile's last step: not read
    validation_only = [{"step": last, "data": {M.REWARD: 0.5}}]  # a resumed attempt's first line adds to the step
    write_run(tmp_path / "logs", "tiny", experiment, arm, 1, [_steps(last, 30.0, 100.0), validation_only],
              manifest={"hardware": here}, stamp="20260102T000000Z")
    shares = bench.quick_step_shares(here)
    assert shares["generation_share"] == pytest.approx(0.3) and shares["step_s"] == pytest.approx(100.0)
    assert shares["same_cpu_kind"] and shares["steps"] == f"1-{last}" and len(shares["runs"]) == 2
    assert bench.quick_step_shares(other)["generation_share"] == pytest.approx(0.1)
    zen2 = dict(here, cpu_id="AuthenticAMD family 23 model 49 stepping 0", matrix_flags=[])
    write_run(tmp_path / "calibration", "tiny", experiment, arm, 42, [_steps(last, 40.0, 100.0)],
              manifest={"hardware": zen2}, stamp="20260103T000000Z")  # a kind only the calibration runs were made on
    write_run(tmp_path / "calibration", "tiny", experiment, arm, 42, [_steps(last, 30.0, 100.0)],
              manifest={"hardware": here})  # the published seed-42 run, copied
    assert bench.quick_step_shares(zen2)["generation_share"] == pytest.approx(0.4)
    assert len(bench.quick_step_shares(here)["runs"]) == 2  # the published run's copy among the calibration runs


def test_the_weight_re_quantization_is_timed_on_the_shipped_model(load_benchmark):
    bench = load_benchmark("bench_vllm_gemm")
    assert 0 < bench.weight_quantization_s("fp8_e4m3") < 60


def test_every_rollout_format_s_linear_layers_are_timed(load_benchmark, monkeypatch):
    from precision_rl.formats import QUANTIZED_FORMATS
    from precision_rl.tiny.shipped import SHIPPED_DIR

    bench = load_benchmark("bench_vllm_gemm")
    monkeypatch.setattr(bench, "LAYER_REPEATS", 1)
    timings = bench.decode_step_linear_ms(str(SHIPPED_DIR))
    assert set(timings) == {"invariant", *QUANTIZED_FORMATS} and all(t > 0 for t in timings.values())


def test_a_format_s_step_cost_is_its_linear_layers_extra_time_within_generation_plus_the_weight_sync(load_benchmark):
    bench = load_benchmark("bench_vllm_gemm")
    shares = {"generation_share": 0.4, "step_s": 50.0}
    layers = {"format": "fp4_e2m1", "linear_layers_extra_ms": 2.0, "slowdown_ms": -1.0}
    cost = bench.step_cost(layers, 10.0, shares, weight_sync_s=0.5)
    assert cost["linear_layers"] == pytest.approx(0.08) and cost["weight_sync"] == pytest.approx(0.01)
    assert cost["total"] == pytest.approx(0.09) and cost["meets_goal"]
    assert cost["decoding_in_vllm"] == pytest.approx(-0.04)  # shown beside, not counted
    assert not bench.step_cost(dict(layers, linear_layers_extra_ms=3.0), 10.0, shares, 0.5)["meets_goal"]
