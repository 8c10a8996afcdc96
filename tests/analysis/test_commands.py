"""Every analysis script runs end to end on fixture runs and writes what it promises."""

import os
import runpy
import subprocess
import sys

import numpy as np
import pytest

from precision_rl import metrics as M
from precision_rl.analysis.figures import FIGURES
from precision_rl.analysis.synthetic import run_records, write_mismatch_result, write_run
from precision_rl.paths import REPO_ROOT

ANALYSIS = REPO_ROOT / "analysis"


def run_script(name, *argv):
    """Run analysis/<name>.py in this process as __main__; return its exit code."""
    old = sys.argv
    sys.argv = [str(ANALYSIS / f"{name}.py"), *map(str, argv)]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exc:
        return exc.code
    finally:
        sys.argv = old
    return 0


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    base = tmp_path_factory.mktemp("analysis")
    rng = np.random.default_rng(1)
    runs = base / "runs"
    for precision, collapse in (("fp16", None), ("bf16", 12)):
        for seed in (1, 2):
            write_run(runs, "tiny", "sanity/grpo", precision, seed,
                      [run_records(20, precision, rng, n_metrics=12, collapse_at=collapse,
                                   val_sets=("tiny_sanity_val",), val_n=4, test_freq=5)])
    write_run(runs, "tiny", "sanity/pg_seq_is", "fp16", 1,
              [run_records(20, "fp16", rng, n_metrics=12, val_sets=("tiny_sanity_val",), bypass=True)],
              algorithm="pg_seq_is")
    write_run(runs, "tiny", "ablation/precision", "train_bf16-infer_fp32", 1, [run_records(20, "bf16", rng)])
    for dtype in ("bf16", "fp16"):
        write_mismatch_result(runs / "mismatch", "tiny-qwen2", dtype, dtype, rng, n_sequences=16, max_len=200)
    results = base / "results"
    assert run_script("collect", "--root", runs, "--out", results) == 0
    return base


def test_collect_writes_the_table(workspace):
    import pandas as pd

    table = pd.read_parquet(workspace / "results" / "metrics.parquet")
    assert set(table["run"]) == {"sanity.grpo-fp16-s1", "sanity.grpo-fp16-s2", "sanity.grpo-bf16-s1",
                                 "sanity.grpo-bf16-s2", "sanity.pg_seq_is-fp16-s1",
                                 "ablation.precision-train_bf16-infer_fp32-s1"}
    assert (workspace / "results" / "metrics.csv").stat().st_size > 0
    reward = table[(table["run"] == "sanity.grpo-fp16-s1") & (table["metric"] == M.REWARD)]
    assert sorted(reward["step"]) == list(range(1, 21))


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_script_writes_png_and_pdf(workspace, name):
    out = workspace / "figs" / "tiny" / f"{name}.png"
    code = run_script(name, "--scale", "tiny", "--results", workspace / "results",
                      "--mismatch", workspace / "runs" / "mismatch", "--out", out)
    assert code == 0
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    assert out.with_suffix(".pdf").stat().st_size > 1_000


def test_figures_script_draws_both_scales(workspace):
    out = workspace / "all"
    assert run_script("figures", "--results", workspace / "results", "--mismatch", workspace / "runs" / "mismatch",
                      "--out", out, "--only", "fig1_training_reward", "fig5_offline_mismatch") == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.p*")) == [
        f"{s}/{f}.{e}" for s in ("paper", "tiny") for f in ("fig1_training_reward", "fig5_offline_mismatch")
        for e in ("pdf", "png")]


def test_tables_and_check_scripts(workspace, capsys):
    assert run_script("tables", "--results", workspace / "results") == 0
    assert "sanity/grpo" in (workspace / "results" / "summary.md").read_text()
    assert run_script("check", "sanity.grpo-fp16-*", "--results", workspace / "results") == 0
    assert run_script("check", "sanity/grpo", "--results", workspace / "results") == 1  # the collapsed bf16 runs
    assert "FAILED sanity_reward: sanity.grpo-bf16-s1" in capsys.readouterr().err


def test_a_user_error_is_one_line_and_exit_2(workspace):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, str(ANALYSIS / "check.py"), "no-such-run", "--results",
                           str(workspace / "results")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith("error: no run matches")
