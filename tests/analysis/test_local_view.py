"""A user's runs never rewrite the committed results: `make figures`, `make tables` and `make check` read the local
runs and write under <runs>/_analysis/; only `make published-results` writes results/ and paper_figures/."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from precision_rl import paths
from precision_rl.analysis.synthetic import run_records, write_run
from precision_rl.cli import main

VENV = Path(sys.executable).parent.parent


def committed_files() -> dict[str, str]:
    """Return the sha256 of every file git tracks under results/ and paper_figures/."""
    listed = subprocess.run(["git", "ls-files", "-z", "results", "paper_figures"], cwd=paths.REPO_ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return {name: hashlib.sha256((paths.REPO_ROOT / name).read_bytes()).hexdigest() for name in listed if name}


def make(runs_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PRECISION_RL_RUNS=str(runs_dir))
    return subprocess.run(["make", "-s", f"VENV={VENV}", f"RUNS_DIR={runs_dir}", *args], cwd=paths.REPO_ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("local") / "runs"
    rng = np.random.default_rng(3)
    write_run(root, "tiny", "sanity/grpo", "fp16", 42, [run_records(12, "fp16", rng, n_metrics=12)])
    write_run(root, "tiny", "sanity/grpo", "bf16", 42, [run_records(4, "bf16", rng, n_metrics=12)],
              manifest={"extra_overrides": ["trainer.total_training_steps=4"]})
    return root


def test_local_figures_tables_and_checks_write_only_under_the_runs_folder(local_runs):
    before = committed_files()
    out = local_runs / paths.ANALYSIS_DIR
    figure = out / paths.FIGURES_SUBDIR / "tiny" / "fig1_training_reward.png"
    drawn = make(local_runs, str(figure), "tables")  # one figure's own target: `make figures` draws them all alike
    assert drawn.returncode == 0, drawn.stderr
    checked = make(local_runs, "check")
    assert committed_files() == before
    assert figure.stat().st_size > 10_000 and figure.with_suffix(".pdf").is_file()
    assert (out / "summary.md").is_file() and (out / "metrics.parquet").is_file()
    # the FP16 run has no BF16 run of its configuration (the BF16 run is 4 steps with an extra override)
    assert "no BF16 run of this configuration" in checked.stdout, checked.stdout + checked.stderr
    assert "local runs" in checked.stderr


def test_without_local_runs_the_analysis_is_one_line_pointing_at_the_committed_results(tmp_path):
    made = make(tmp_path / "none", "figures")
    errors = [line for line in made.stderr.splitlines() if line.startswith("error:")]
    assert made.returncode != 0 and len(errors) == 1, made.stderr
    assert "no runs under" in errors[0] and "make published-results" in errors[0]


@pytest.mark.parametrize("argv", [["figures", "--out", "paper_figures"],
                                  ["tables", "--results", "results"],
                                  ["collect", "--out", "results"]])
def test_the_local_view_refuses_to_write_committed_folders(local_runs, argv, capsys):
    before = committed_files()
    assert main([*argv, "--runs", str(local_runs)] if argv[0] != "collect" else [*argv, str(local_runs)]) == 2
    assert "holds committed results" in capsys.readouterr().err
    assert committed_files() == before


def test_check_reads_the_runs_again_when_the_collected_table_is_stale(tmp_path, monkeypatch, capsys):
    root = tmp_path / "runs"
    rng = np.random.default_rng(5)
    write_run(root, "tiny", "sanity/grpo", "fp16", 42, [run_records(12, "fp16", rng, n_metrics=12)])
    monkeypatch.setenv(paths.RUNS_ENV, str(root))
    assert main(["collect"]) == 0
    assert main(["check"]) in (0, 1)
    assert "stale" not in capsys.readouterr().err
    write_run(root, "tiny", "sanity/grpo", "fp16", 1, [run_records(12, "fp16", rng, n_metrics=12)])
    assert main(["check"]) in (0, 1)
    captured = capsys.readouterr()
    assert "is stale (1 run(s) added and 0 gone" in captured.err
    assert "s1-" in captured.out  # the run added after the collection is judged
