"""`benchmarks/bench_trainer.py` on a small micro-batch: each pass of an arm is timed and split by operator, the
GEMMs found by the operator names torch's profiler gives them, and the micro-batch length read from the published
runs."""

import pytest

from precision_rl import paths
from precision_rl.analysis import phase_rates
from precision_rl.config.registry import load_experiment
from precision_rl.verl_ext.cpu.features import gemm_mode


@pytest.mark.parametrize("arm", ["fp16", "fp32"])
def test_each_pass_is_split_into_gemms_and_the_rest(arm, load_benchmark):
    bench = load_benchmark("bench_trainer")
    records = bench.measure(arm, rows=4, length=16, repeats=1)
    assert [r["phase"] for r in records] == [phase_rates.OLD_LOG_PROB, phase_rates.UPDATE]
    for record in records:
        assert record["gemm_mode"] == (gemm_mode("fp16") if arm == "fp16" else "fp32")
        assert sum(record["share"].values()) == pytest.approx(1.0)
        assert record["share"]["GEMM"] > 0.1  # the profiler's GEMM operators are still named as OP_CLASSES has them
        assert record["wall_s"] > 0 and record["gemm_gflop_per_s"] > 0
    forward, update = records
    assert update["gemm_gflop"] == pytest.approx(3 * forward["gemm_gflop"])  # 6 FLOPs a weight against 2


def test_the_micro_batch_is_the_instruments(monkeypatch, load_benchmark):
    bench = load_benchmark("bench_trainer")
    with pytest.raises(SystemExit, match="no published calibrated sanity/grpo FP16 run"):
        bench.padded_length()  # the tests' default: no published logs
    monkeypatch.setenv(paths.LOGS_ENV, str(paths.LOGS_DIR))
    hyper = load_experiment("sanity/grpo", "tiny").hyper
    assert 1 < bench.padded_length() <= hyper.max_prompt_length + hyper.max_response_length
    batch = bench.micro_batch(8, 20, vocab=345)
    assert batch["input_ids"].shape == (8, 20) and batch["attention_mask"][:, 0].all()
    assert (batch["input_ids"][batch["attention_mask"] == 0] == 0).all()
