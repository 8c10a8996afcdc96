"""How far the grid is: the registry's planned runs against the finished runs of a summary, and its Markdown."""

import math

import pandas as pd
import pytest

from precision_rl.analysis import progress
from precision_rl.analysis.tables import SUMMARY_COLUMNS
from precision_rl.config import registry


def run(experiment, precision, seed, status="finished", scale="tiny", wall=100.0, profile=None):
    row = dict.fromkeys(SUMMARY_COLUMNS, math.nan)
    row.update(scale=scale, experiment=experiment, precision=precision, seed=seed, status=status, wall_time_s=wall,
               profile=profile or ("quick" if scale == "tiny" else "paper"))
    return row


@pytest.fixture
def summary():
    return pd.DataFrame([
        *(run("sanity/grpo", arm, seed) for arm in ("fp16", "bf16") for seed in (42, 1, 7)),
        run("sanity/gspo", "fp16", 42, wall=200.0), run("sanity/gspo", "bf16", 42, wall=400.0),
        run("sanity/gspo", "fp16", 1, wall=300.0),
        run("sanity/gspo", "bf16", 1, status="interrupted"),  # not finished: still to run
        run("sanity/gspo", "fp16", 3),  # a seed the grid does not plan: not counted
        run("sanity/pg_seq_is", "fp16", 42, scale="paper", wall=3600.0),
        run("moe/pg_seq_tis", "fp16", 42, wall=50.0), run("moe/pg_seq_tis", "bf16", 42, wall=70.0),
    ])


def test_every_planned_run_is_listed_once_and_only_finished_planned_runs_count(summary):
    grid = progress.grid_progress(summary)
    for scale in ("tiny", "paper"):
        specs = registry.load_all(scale)
        rows = grid[grid["scale"] == scale].set_index("experiment")
        assert list(rows.index) == [name for name, s in specs.items() if s.scale_arms]
        assert rows["planned"].sum() == sum(len(s.scale_arms) * len(s.seeds) for s in specs.values())
    assert "ladder/synthetic_s2" not in set(grid[grid["scale"] == "paper"]["experiment"])  # tiny scale only
    tiny = grid[grid["scale"] == "tiny"].set_index("experiment")
    assert tiny.loc["sanity/grpo", ["planned", "finished", "not_run"]].tolist() == [6, 6, ""]
    assert tiny.loc["sanity/gspo", ["finished", "not_run"]].tolist() == [3, "fp16: s7; bf16: s1 s7"]
    assert tiny.loc["ablation/precision", ["finished", "not_run"]].tolist() == [0, "all"]
    paper = grid[grid["scale"] == "paper"].set_index("experiment")
    assert paper.loc["sanity/pg_seq_is", ["planned", "finished", "not_run"]].tolist() == [2, 1, "bf16: s42"]


def test_the_section_states_the_totals_per_family_and_the_command_for_the_rest(summary):
    grid = progress.grid_progress(summary)
    tiny = grid[grid["scale"] == "tiny"]
    text = progress.scale_section(grid, "tiny")
    assert text.startswith(f"**11 of the {tiny['planned'].sum()} runs the registry plans at tiny scale have finished**")
    sanity_planned = tiny[tiny["experiment"].str.startswith("sanity/")]["planned"].sum()
    assert f"sanity 9/{sanity_planned}" in text and f"`make grid SCALE=tiny` runs the other {tiny['planned'].sum() - 11}" in text
    row = next(line for line in text.splitlines() if line.startswith("| sanity/gspo "))
    assert [c.strip() for c in row.strip("|").split("|")] == ["sanity/gspo", "42 1 7", "3/6", "300 s",
                                                           "fp16: s7; bf16: s1 s7"]
    complete = grid.assign(finished=grid["planned"], not_run="")
    assert "The grid is complete." in progress.scale_section(complete, "tiny")


def test_write_progress_and_the_readme_block(summary, tmp_path):
    grid = progress.grid_progress(summary)
    csv_path, md_path = progress.write_progress(grid, tmp_path)
    assert len(pd.read_csv(csv_path)) == len(grid)
    assert md_path.read_text().startswith("# The grid: runs planned and finished\n\n## paper scale\n")
    readme = f"a\n{progress.README_BLOCK.render('stale')}\nb\n"
    assert progress.readme_with_block(readme, grid) == \
        f"a\n{progress.README_BLOCK.render(progress.scale_section(grid, 'tiny'))}\nb\n"


def test_wall_times_and_the_estimate_of_the_rest(summary):
    grid = progress.grid_progress(summary)
    tiny = grid[grid["scale"] == "tiny"].set_index("experiment")
    assert tiny.loc["sanity/gspo", ["finished_wall_s", "median_wall_s"]].tolist() == [900.0, 300.0]
    # sanity/gspo's 3 runs not made yet: the sanity family's median over its 9 finished runs (6 x 100, 200, 300, 400)
    assert tiny.loc["sanity/gspo", "not_run_estimate_s"] == 3 * 100.0
    assert tiny.loc["sanity/grpo", "not_run_estimate_s"] == 0
    # no ablation has run: the median of all the scale's finished planned runs (9 sanity, 2 moe)
    assert tiny.loc["ablation/precision", "not_run_estimate_s"] == 21 * 100.0
    assert math.isnan(tiny.loc["ablation/precision", "median_wall_s"])
    paper = grid[grid["scale"] == "paper"].set_index("experiment")
    assert paper["not_run_estimate_s"].sum() == (paper["planned"].sum() - 1) * 3600.0
    text = progress.scale_section(grid, "tiny")
    assert "have finished** and took 0.5 h in all" in text
    assert f"they take about {tiny['not_run_estimate_s'].sum() / 3600:.1f} h" in text
    assert "| sanity/gspo " in text and "| 300 s " in text


def test_a_scale_with_no_finished_run_gives_no_estimate(summary):
    grid = progress.grid_progress(summary[summary["scale"] != "paper"])
    text = progress.scale_section(grid, "paper")
    assert text.startswith("**0 of the")
    assert "no run of this scale has finished here in the profile it runs, so there is no wall time" in text
    assert "they take about" not in text


def test_the_estimate_reads_only_runs_of_the_profile_the_grid_runs(summary):
    calibrated = pd.concat([summary, pd.DataFrame([run("sanity/gspo", "bf16", 7, wall=20000.0, profile="calibrated")])],
                           ignore_index=True)
    tiny = progress.grid_progress(calibrated).query("scale == 'tiny'").set_index("experiment")
    assert tiny.loc["sanity/gspo", ["finished", "median_wall_s"]].tolist() == [4, 350.0]  # counted as done
    assert tiny.loc["sanity/gspo", "not_run_estimate_s"] == 2 * 100.0  # but not timing the quick runs
    only_calibrated = pd.DataFrame([run("sanity/grpo", "fp16", 42, wall=20000.0, profile="calibrated")])
    grid = progress.grid_progress(only_calibrated)
    assert "no run of this scale has finished here in the profile it runs" in progress.scale_section(grid, "tiny")
