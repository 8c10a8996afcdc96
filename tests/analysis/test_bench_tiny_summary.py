"""`benchmarks/bench_tiny.py --existing` on a run resumed from a checkpoint: the summary spans every attempt."""

from precision_rl import metrics as M
from precision_rl.analysis.synthetic import write_run
from precision_rl.launch import runs


def record(step: int) -> dict:
    data = {M.REWARD: min(0.99, 0.8 + 0.02 * step), M.STEP_TIME: 10.0, M.TIMING_PREFIX + "testing": 0.0,
            M.PROBS_DIFF_ABS_MEAN: 1e-4, M.TOKEN_KL_K3: 1e-6, M.TOKEN_KL_K1: 1e-6, M.LOSS_SCALE: 1024.0,
            M.SKIPPED_STEPS: 0.0}
    data.update({M.TIMING_PREFIX + phase: 1.0 for phase in M.STEP_PHASES})
    return {"step": step, "data": data}


def test_summary_of_a_resumed_run_spans_its_attempts(tmp_path, load_benchmark):
    run_dir = write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 42,
                        [[record(s) for s in range(1, 11)], [record(s) for s in range(11, 21)]],
                        manifest={"platform": {"fp16_gemm": "emulated", "bf16_gemm": "native"},
                                  "hardware": {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17",
                                               "matrix_flags": ["avx2", "avx512_bf16"]}})
    doc = runs.read_manifest(run_dir)
    doc["attempts"][0].update(started="20261128T000000Z", ended="20261128T000200Z", peak_memory_gib=8.5)
    doc["attempts"][1].update(started="20261128T010000Z", ended="20261128T010300Z", peak_memory_gib=8.7)
    runs.write_manifest(run_dir, doc)
    summary = load_benchmark("bench_tiny").summarize(run_dir)
    assert summary["attempts"] == 2 and summary["steps"] == 20
    assert summary["wall_s"] == 300.0  # 2 min + 3 min, not the hour between the attempts
    assert summary["outside_steps_s"] == 100.0  # 20 steps of 10 s
    assert summary["peak_memory_gib"] == 8.7
    assert summary["first_step_trailing_0.95"] == 10  # the trailing mean of 5 over steps 6-10 is 0.96
    assert summary["cpu"] == "AMD EPYC (AuthenticAMD family 25 model 17) [avx2, avx512_bf16]"  # the run's, not ours
