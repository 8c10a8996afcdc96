"""docs/tiny.md's instrument numbers: each published calibrated run's end point and cost, per arm and CPU kind."""

import math

from precision_rl import paths
from precision_rl.analysis import instrument_card
from precision_rl.analysis.synthetic import write_run
from precision_rl.metrics import REWARD, STEP_TIME, TIMING_PREFIX

ZEN4 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cpu_count": 2,
        "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}
VAL = "val-core/tiny_sanity_val/acc/mean@4"


def test_the_docs_block_is_what_the_committed_runs_give_now():
    text = (paths.REPO_ROOT / "docs" / "tiny.md").read_text()
    body = instrument_card.section(paths.LOGS_DIR)
    assert instrument_card.DOC_BLOCK.render(body) in text, \
        "docs/tiny.md's instrument-numbers block is stale: run `make published-results`"


def test_the_readme_block_is_what_the_committed_runs_give_now():
    text = (paths.REPO_ROOT / "README.md").read_text()
    assert instrument_card.README_BLOCK.render(instrument_card.readme_section(paths.LOGS_DIR)) in text, \
        "README.md's sanity-verdicts block is stale: run `make published-results`"


def _steps(seed: int, last: int) -> list[dict]:
    records = [{"step": 0, "data": {VAL: 0.70}}]
    for step in range(1, last + 1):
        data = {REWARD: 0.5 + step / 100 + seed / 1000, STEP_TIME: 40.0 + seed, TIMING_PREFIX + "gen": 15.0,
                TIMING_PREFIX + "old_log_prob": 5.0, TIMING_PREFIX + "update_actor": 20.0}
        if step == last:
            data[VAL] = 0.60 + seed / 100
        records.append({"step": step, "data": data})
    return records


def _attempt(peak):
    return {"attempt": 0, "metrics": "metrics.jsonl", "started": "20260101T000000Z", "ended": "20260101T010000Z",
            "status": "finished", "peak_memory_gib": peak}


def test_each_arm_gets_its_seeds_end_points_and_each_cpu_kind_its_cost(tmp_path):
    for seed in (1, 2):
        write_run(tmp_path, "tiny", "sanity/grpo", "fp16", seed, [_steps(seed, 10)], stamp=f"2026010{seed}T000000Z",
                  manifest={"hardware": ZEN4, "attempts": [_attempt(8.0 + seed)]})
    write_run(tmp_path, "tiny", "sanity/grpo", "bf16", 1, [_steps(1, 10)], status="failed",
              manifest={"hardware": ZEN4})
    numbers = instrument_card.published_numbers(tmp_path)
    assert [(n.arm, n.seed) for n in numbers] == [("fp16", 1), ("fp16", 2)], "a failed run is no end point"
    first = numbers[0]
    assert first.last_step == 10 and math.isclose(first.final_reward, 0.5 + 0.08 + 0.001)
    assert (first.heldout_first, first.heldout_last) == (0.70, 0.61) and first.step_seconds == 41.0
    assert first.phase_seconds == (15.0, 5.0, 20.0) and first.peak_memory_gib == 9.0
    body = instrument_card.section(tmp_path)
    assert "| FP16  | 1, 2    |" in body and "0.582 (0.581 to 0.582)" in body and "-0.085 (-0.090 to -0.080)" in body
    assert "family 25 model 17" in body and "| 41.5 " in body and "10.00" in body and "BF16" not in body


def test_no_published_run_is_one_line(tmp_path):
    assert instrument_card.section(tmp_path).startswith("(no finished calibrated run of sanity/grpo")
