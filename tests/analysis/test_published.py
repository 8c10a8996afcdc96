"""Committed figures are drawn from committed logs: publishing a run copies its logs, and every committed figure names
run directories that exist under results/logs."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from precision_rl import paths
from precision_rl.analysis import (
    inference_table,
    mismatch_formats,
    mismatch_scaling,
    pairs,
    paper_compare,
    progress,
    tables,
)
from precision_rl.analysis.figures import RUN_SOURCES, FigureData, draw_figure
from precision_rl.analysis.logs import load_runs, run_dirs_under
from precision_rl.analysis.publish import publish_runs, retire_superseded, stale_algorithm_overrides
from precision_rl.analysis.synthetic import run_records, write_run
from precision_rl.cli import main
from precision_rl.config.scale import SCALES
from precision_rl.errors import UserError
from precision_rl.launch import runs
from precision_rl.mismatch.layout import SEQUENCES_CSV, SUMMARY, TOKENS_CSV
from precision_rl.tiny.heldout import RECORDS_DIR as HELDOUT_RECORDS_DIR


@pytest.mark.parametrize("folder", [paths.FIGURES_DIR / scale for scale in SCALES] + [paths.QUICK_FIGURES_DIR / "tiny"],
                         ids=lambda p: str(p.relative_to(paths.FIGURES_DIR)))
def test_every_committed_figure_names_only_published_runs(folder):
    figures = sorted(folder.glob("*.png"))
    record = folder / RUN_SOURCES
    assert record.is_file(), f"{record} is missing: redraw with `make published-results`"
    sources = json.loads(record.read_text())
    assert sorted(sources) == sorted(f.stem for f in figures)
    for figure, dirs in sources.items():
        for rel in dirs:
            run_dir = paths.REPO_ROOT / rel
            assert run_dir.is_relative_to(paths.LOGS_DIR), f"{folder}/{figure} drew from unpublished {rel}"
            if run_dir.is_relative_to(paths.LOGS_DIR / paths.MISMATCH_DIR):
                assert all((run_dir / name).is_file() for name in (SUMMARY, TOKENS_CSV, SEQUENCES_CSV)), rel
            else:
                assert (run_dir / runs.MANIFEST).is_file() and runs.attempt_files(run_dir), rel


PUBLISHED_RESULTS = "make published-results"


@pytest.fixture(scope="module")
def published_table():
    return load_runs(run_dirs_under(paths.LOGS_DIR))


@pytest.fixture(scope="module")
def published_summary(published_table):
    return tables.summarize(published_table)


def assert_committed(fresh: tuple, committed_csv: str, committed_md: str, rewrite: str, blank_is_text=False):
    """Fail unless the committed CSV and Markdown under results/ equal the ``fresh`` pair written from the logs."""
    fresh_csv, fresh_md = fresh
    committed = paths.RESULTS_DIR / committed_csv
    assert committed.is_file(), f"{committed} is missing: write it with `{rewrite}`"
    stale = f"is stale: rewrite it with `{rewrite}`"
    read = {"keep_default_na": False} if blank_is_text else {}
    pd.testing.assert_frame_equal(pd.read_csv(fresh_csv, **read), pd.read_csv(committed, **read), check_exact=False,
                                  rtol=1e-9, obj=f"{committed} {stale}")
    assert fresh_md.read_text() == (paths.RESULTS_DIR / committed_md).read_text(), f"{committed_md} {stale}"


def test_the_committed_comparison_with_the_paper_is_the_one_the_published_logs_give(published_summary, tmp_path):
    fresh = paper_compare.write_comparison(paper_compare.compare_summary(published_summary), tmp_path)
    assert_committed(fresh, paper_compare.COMPARISON_CSV, paper_compare.COMPARISON_MD, PUBLISHED_RESULTS)


def test_the_committed_run_summary_is_the_one_the_published_logs_give(published_summary, tmp_path):
    assert_committed(tables.write_summary(published_summary, tmp_path), tables.SUMMARY_CSV, tables.SUMMARY_MD, PUBLISHED_RESULTS)


def test_the_committed_pairs_and_the_readme_block_are_the_ones_the_published_logs_give(published_summary, tmp_path):
    fresh = pairs.pair_runs(published_summary)
    assert_committed(pairs.write_pairs(fresh, tmp_path), pairs.PAIRS_CSV, pairs.PAIRS_MD, PUBLISHED_RESULTS)
    readme = (paths.RESULTS_DIR / "README.md").read_text()
    assert pairs.readme_with_block(readme, fresh) == readme, f"results/README.md's pairs block is stale: " \
                                                             f"{PUBLISHED_RESULTS}"


def test_the_committed_grid_progress_and_its_readme_block_are_the_ones_the_published_logs_give(published_summary,
                                                                                              tmp_path):
    fresh = progress.grid_progress(published_summary)
    assert_committed(progress.write_progress(fresh, tmp_path), progress.PROGRESS_CSV, progress.PROGRESS_MD,
                     PUBLISHED_RESULTS, blank_is_text=True)
    readme = (paths.RESULTS_DIR / "README.md").read_text()
    assert progress.readme_with_block(readme, fresh) == readme, f"results/README.md's grid block is stale: " \
                                                                f"{PUBLISHED_RESULTS}"


def test_the_committed_table2_is_the_one_the_published_logs_give(published_table, tmp_path):
    fresh = inference_table.inference_table(published_table)
    assert_committed(inference_table.write_inference_table(fresh, tmp_path), inference_table.INFERENCE_CSV,
                     inference_table.INFERENCE_MD, PUBLISHED_RESULTS, blank_is_text=True)


def test_the_committed_width_table_is_the_one_the_published_mismatch_results_give(tmp_path):
    fresh = mismatch_scaling.write_width(mismatch_scaling.width_table(paths.LOGS_DIR / paths.MISMATCH_DIR), tmp_path)
    assert_committed(fresh, mismatch_scaling.WIDTH_CSV, mismatch_scaling.WIDTH_MD, PUBLISHED_RESULTS)


def test_the_committed_ladder_formats_table_and_its_readme_block_are_the_ones_the_published_results_give(tmp_path):
    fresh = mismatch_formats.formats_table(paths.LOGS_DIR / paths.MISMATCH_DIR)
    assert not fresh.empty, "no ladder-formats result published under results/logs/mismatch"
    assert_committed(mismatch_formats.write_formats(fresh, tmp_path), mismatch_formats.FORMATS_CSV,
                     mismatch_formats.FORMATS_MD, PUBLISHED_RESULTS)
    readme = (paths.RESULTS_DIR / "README.md").read_text()
    block = mismatch_formats.README_BLOCK
    assert block.replace(readme, mismatch_formats.formats_markdown_table(fresh)) == readme, \
        f"results/README.md's ladder-formats block is stale: {PUBLISHED_RESULTS}"


@pytest.fixture
def finished_and_interrupted(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "runs"
    done = write_run(root, "tiny", "sanity/grpo", "fp16", 1, [run_records(5, "fp16", rng), run_records(3, "fp16", rng)])
    cut = write_run(root, "tiny", "sanity/grpo", "bf16", 1, [run_records(5, "bf16", rng)], status="interrupted")
    return root, done, cut


def test_publishing_copies_the_logs_and_the_copy_reads_as_the_run(finished_and_interrupted, tmp_path, monkeypatch):
    root, done, cut = finished_and_interrupted
    rng = np.random.default_rng(1)
    published = tmp_path / "logs"
    monkeypatch.setenv(paths.LOGS_ENV, str(published))
    (copy,) = publish_runs([done], published)
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in [done / runs.MANIFEST, *runs.attempt_files(done)])
    assert copy.relative_to(published) == done.relative_to(root)
    with pytest.raises(UserError, match="not finished"):
        publish_runs([cut], published)
    tuned = write_run(root, "tiny", "sanity/grpo", "fp16", 2, [run_records(2, "fp16", rng)],
                      manifest={"extra_overrides": ["actor_rollout_ref.actor.optim.lr=2e-4"]})
    with pytest.raises(UserError, match="not the registered experiment"):
        publish_runs([tuned], published)
    shutil.rmtree(tuned)
    local = load_runs(run_dirs_under(root))  # the local runs only: the published copy is not read beside them
    assert sorted(local.runs["source"]) == sorted([str(done), str(cut)])
    both = load_runs([root, published])  # a run and its published copy count once, silently
    assert len(both.runs) == 2
    shutil.rmtree(root)
    assert run_dirs_under(root) == []
    alone = load_runs(run_dirs_under(published))
    assert list(alone.runs["run"]) == ["sanity.grpo-fp16-s1"]
    original = load_runs([copy]).metrics
    assert len(alone.metrics) == len(original) > 0


def test_a_run_of_a_new_configuration_retires_the_published_runs_of_the_old_one_only_when_asked(tmp_path, capsys):
    rng = np.random.default_rng(2)
    root, published = tmp_path / "runs", tmp_path / "logs"
    old_profile, new_profile = {"spec": {"hyper": {"lr": 2e-4}}}, {"spec": {"hyper": {"lr": 1e-4}}}
    old = [write_run(published, "tiny", "sanity/grpo", arm, 1, [run_records(3, arm, rng)], manifest=old_profile)
           for arm in ("fp16", "bf16")]
    other = write_run(published, "tiny", "sanity/gspo", "fp16", 1, [run_records(3, "fp16", rng)], manifest=old_profile)
    new = write_run(root, "tiny", "sanity/grpo", "fp16", 1, [run_records(3, "fp16", rng)], stamp="20260102T000000Z",
                    manifest=new_profile)
    with pytest.raises(UserError, match="another configuration.*--retire"):
        publish_runs([new], published)
    assert all(p.is_dir() for p in old)
    assert main(["publish", "--root", str(root), "--out", str(published)]) == 2
    assert "--retire" in capsys.readouterr().err and all(p.is_dir() for p in old)
    assert main(["publish", "--root", str(root), "--out", str(published), "--retire"]) == 0
    err = capsys.readouterr().err
    assert err.count("retired (configuration") == 2
    assert not any(p.exists() for p in old) and other.is_dir()  # another experiment keeps its runs
    assert sorted(load_runs([published]).runs["run"]) == ["sanity.grpo-fp16-s1", "sanity.gspo-fp16-s1"]
    assert retire_superseded([new], published) == []  # the same configuration again retires nothing
    second = write_run(root, "tiny", "sanity/grpo", "bf16", 1, [run_records(3, "bf16", rng)], manifest=old_profile)
    with pytest.raises(UserError, match="2 configurations of sanity/grpo"):
        publish_runs([new, second], published)


def test_calibration_runs_are_published_whatever_their_status_and_overrides_and_only_where_asked(tmp_path, capsys):
    rng = np.random.default_rng(3)
    root, published, calibration = tmp_path / "runs", tmp_path / "logs", tmp_path / "calibration"
    tuned = {"extra_overrides": ["actor_rollout_ref.rollout.n=32"]}
    stopped = write_run(root, "tiny", "sanity/grpo", "fp16", 42, [run_records(4, "fp16", rng)], status="interrupted",
                        manifest=tuned)
    other = write_run(root, "tiny", "sanity/grpo", "fp16", 1, [run_records(3, "fp16", rng)], stamp="20260102T000000Z",
                      manifest={"extra_overrides": ["actor_rollout_ref.actor.optim.lr=5e-5"]})
    assert main(["publish", "--root", str(root), "--out", str(published)]) == 2  # one stopped, both tuned
    assert not published.exists()
    assert main(["publish", "--root", str(root), "--out", str(calibration), "--calibration"]) == 0
    copies = [calibration / run.relative_to(root) for run in (stopped, other)]
    assert [sorted(p.name for p in c.iterdir()) for c in copies] == [[runs.MANIFEST, "metrics.jsonl"]] * 2
    assert load_runs([copies[0]]).runs["status"].tolist() == ["interrupted"]
    last = json.loads((stopped / "metrics.jsonl").read_text().splitlines()[-1])
    with open(stopped / "metrics.jsonl", "a") as fh:  # the run went on: publishing again takes its longer log
        fh.write(json.dumps({**last, "step": last["step"] + 1}) + "\n")
    assert main(["publish", "sanity.grpo-fp16-s42", "--root", str(root), "--out", str(calibration), "--calibration"]) == 0
    assert (copies[0] / "metrics.jsonl").read_text() == (stopped / "metrics.jsonl").read_text()
    (stopped / HELDOUT_RECORDS_DIR).mkdir()  # `make heldout` measured a checkpoint: its record travels with the logs
    (stopped / HELDOUT_RECORDS_DIR / "step_4.json").write_text('{"model": "step_4"}')
    assert main(["publish", "sanity.grpo-fp16-s42", "--root", str(root), "--out", str(calibration), "--calibration"]) == 0
    assert (copies[0] / HELDOUT_RECORDS_DIR / "step_4.json").read_text() == '{"model": "step_4"}'
    assert not (copies[1] / HELDOUT_RECORDS_DIR).exists()
    capsys.readouterr()
    assert main(["publish", "--root", str(root), "--calibration", "--retire"]) == 2
    assert "--retire does not apply" in capsys.readouterr().err


def test_a_figure_records_the_runs_it_drew_from(finished_and_interrupted, tmp_path):
    root, done, _ = finished_and_interrupted
    data = FigureData(load_runs([root]), tmp_path / "no-mismatch")
    png, _ = draw_figure(data, "fig1_training_reward", "tiny", tmp_path / "fig" / "fig1_training_reward.png")
    recorded = json.loads((png.parent / RUN_SOURCES).read_text())["fig1_training_reward"]
    assert recorded == [str(done)]  # the interrupted run is not drawn, so not recorded


def test_the_committed_reference_holds_the_grpo_pair_once_per_cpu_kind_with_the_gate_s_metrics():
    """results/reference/ keeps one 2-step GRPO pair per CPU kind (each read as a table of its own); the pair written
    since runs log the median |log ratio| carries it at both steps."""
    from precision_rl import metrics as M
    from precision_rl.analysis.logs import load_committed_tables

    tables = load_committed_tables(paths.REFERENCE_DIR / "tiny")
    assert len(tables) >= 2
    flags = set()
    for table in tables:
        assert sorted(table.runs["run"]) == ["sanity.grpo-bf16-s42", "sanity.grpo-fp16-s42"]
        flags.add(tuple(sorted({tuple(runs.read_manifest(p)["hardware"]["matrix_flags"])
                                for p in map(Path, table.runs["source"])})))
    assert len(flags) == len(tables)  # each table one CPU kind, no two alike
    with_median = [t for t in tables if M.ABS_LOG_RATIO_MEDIAN in set(t.metrics["metric"])]
    assert with_median and all(
        sorted(t.metrics[t.metrics["metric"] == M.ABS_LOG_RATIO_MEDIAN]["step"]) == [1, 1, 2, 2] for t in with_median)


def test_every_published_tiny_run_was_made_with_the_shipped_instrument():
    from precision_rl.tiny.data import instrument_problem, instrument_record
    from precision_rl.tiny.shipped import SHIPPED_DIR

    current = instrument_record(SHIPPED_DIR)
    published = run_dirs_under(paths.LOGS_DIR / "tiny")
    assert published
    wrong = {str(d): p for d in published if (p := instrument_problem(runs.read_manifest(d).get("tiny_instrument"),
                                                                        current))}
    assert wrong == {}


def test_every_published_run_took_its_algorithm_as_rendered_now_or_a_window_its_logs_show_equivalent():
    """A published run took today's algorithm overrides. The one allowed difference: a masked-IS window whose upper k1
    end (a floor 1/hi on ρ) was finite, where the run's logs show the floor never bound: the largest
    −Σ log ρ of every step stayed below log(hi), so its mask was today's at every step."""
    inequivalent = {}
    for run_dir in run_dirs_under(paths.LOGS_DIR):
        manifest = runs.read_manifest(run_dir)
        if not (stale := stale_algorithm_overrides(manifest)):
            continue
        taken = [o for o in manifest["verl_overrides"] if o.split("=", 1)[0] in {s.split("=", 1)[0] for s in stale}]
        if any("rollout_rs_threshold" not in o for o in stale) or not taken:
            inequivalent[str(run_dir)] = stale
            continue
        floor_log = min(math.log(float(o.split("=", 1)[1].strip('"').split("_")[1])) for o in taken)
        records = [json.loads(line) for path in runs.attempt_files(run_dir) if path.suffix == ".jsonl"
                   for line in path.read_text().splitlines() if line.strip()]
        largest = [v for r in records for k, v in r["data"].items()
                   if k.endswith("rollout_rs_seq_sum_k1_seq_max") and v is not None]
        if not largest or max(largest) >= floor_log:
            inequivalent[str(run_dir)] = stale
    assert inequivalent == {}
