"""The README's contract through make: help is the default, and the paper command prints exactly one line."""

import os
import subprocess
import sys
from pathlib import Path

from precision_rl.paths import REPO_ROOT

VENV = Path(sys.executable).parent.parent


def make(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PRECISION_RL_RUNS=str(REPO_ROOT / ".cache" / "test-runs-unused"))
    return subprocess.run(["make", "-s", f"VENV={VENV}", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=env, timeout=120)


def test_make_prints_help_by_default():
    out = make().stdout
    for target in ("setup", "test", "lint", "list", "sanity-fp16", "sanity-bf16", "sanity", "octothinker", "lora",
                   "moe", "dense14b", "ablation", "fork-ablation", "eval-precision", "fp16-comparison"):
        assert f"{target} " in out, target


def test_make_sanity_fp16_paper_dry_run_prints_the_verl_command():
    result = make("sanity-fp16", "SCALE=paper", "DRY_RUN=1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16" in lines[0]
    assert "actor_rollout_ref.rollout.dtype=float16" in lines[0]
    assert not (REPO_ROOT / ".cache" / "test-runs-unused").exists()


def test_make_list_prints_the_registry():
    out = make("list").stdout
    assert "sanity/pg_seq_mis" in out and "dense14b/dapo" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and "/" in line.split()[0]}
    sourced, assumed, conflict = (int(v) for v in rows["moe/grpo_seq_mis"][-3:])
    assert assumed == 13 and conflict == 0 and sourced > 0
    assert [int(v) for v in rows["sanity/grpo"][-2:]] == [0, 4]  # grader, val top_p, clip-higher, cadence
