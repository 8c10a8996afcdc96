"""The README's profile-times block: each tiny profile's time per CPU kind, read from the committed runs."""

from precision_rl import paths
from precision_rl.analysis import profile_times
from precision_rl.analysis.synthetic import write_run
from precision_rl.metrics import STEP_TIME

ZEN4 = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cpu_count": 2,
        "matrix_flags": ["avx2", "avx512_bf16", "avx512f"]}


def test_the_readme_block_is_what_the_committed_runs_give_now():
    text = (paths.REPO_ROOT / "README.md").read_text()
    body = profile_times.section(paths.LOGS_DIR)
    assert profile_times.README_BLOCK.render(body) in text, \
        "README.md's profile-times block is stale: run `make published-results`"


def test_each_arm_and_cpu_kind_gets_both_profiles_or_a_dash_where_no_run_logged_their_steps(tmp_path):
    quick_only = [{"step": s, "data": {STEP_TIME: 60.0}} for s in range(1, 26)]
    for seed in (42, 1):
        write_run(tmp_path, "tiny", "sanity/grpo", "fp16", seed, [quick_only], manifest={
            "hardware": ZEN4, "attempts": [{"attempt": 0, "metrics": "metrics.jsonl", "started": "20260101T000000Z",
                                            "ended": "20260101T003000Z", "status": "finished"}]})
    rows = profile_times.profile_rows(tmp_path)
    assert len(rows) == 2  # fp16 with runs, bf16 without, both on the one committed kind
    fp16 = next(r for r in rows if r[0] == "FP16")
    assert fp16[2] == "30 min (2 run(s))"  # 5 min of start-up and 25 steps of 60 s and fp16[3] == "-" and "family 25 model 17" in fp16[1]
    assert next(r for r in rows if r[0] == "BF16")[2:] == ["-", "-"]
