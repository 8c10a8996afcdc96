"""Each experiments/<family>/README.md: one per family, its generated table fresh."""

import pandas as pd

from precision_rl.analysis import family_readmes
from precision_rl.config import registry


def test_every_family_has_a_readme_whose_block_is_what_the_registry_and_the_published_runs_give_now():
    summary = family_readmes.read_summary()
    for family in family_readmes.families():
        readme = registry.EXPERIMENTS_DIR / family / family_readmes.README
        assert readme.is_file(), f"experiments/{family} has no README.md"
        body = family_readmes.section(family, summary)
        assert family_readmes.BLOCK.render(body) in readme.read_text(), \
            f"experiments/{family}/README.md's table is stale: run `make published-results`"


def test_a_row_names_every_arm_marks_tiny_only_ones_and_gives_the_published_seeds_spread():
    summary = pd.DataFrame([
        {"scale": "tiny", "experiment": "ladder/grpo", "precision": "train_fp16-infer_fp4_e2m1", "seed": s,
         "status": "finished", "profile": "quick", "last_step": 25, "final_reward": r, "wall_time_s": 1800.0}
        for s, r in ((42, 0.5), (1, 0.7))] + [
        {"scale": "tiny", "experiment": "ladder/grpo", "precision": "train_fp16-infer_bf16", "seed": 42,
         "status": "failed", "profile": "quick", "last_step": 3, "final_reward": 0.1, "wall_time_s": 90.0}])
    body = family_readmes.section("ladder", summary)
    row = next(line for line in body.splitlines() if "`ladder/grpo`" in line)
    assert "train_fp16-infer_fp4_e2m1*" in row and "train_fp16-infer_bf16," in row
    assert "train_fp16-infer_fp4_e2m1: seeds 1, 42, step 25: 0.600 (0.500 to 0.700)" in row
    assert "infer_bf16: " not in row, "a failed run is not published"
    untouched = next(line for line in body.splitlines() if "`ladder/synthetic_s1`" in line)
    assert untouched.rstrip(" |").endswith("-")


def test_a_family_s_block_ends_with_its_runs_finished_and_the_time_the_rest_take():
    from precision_rl.analysis.family_readmes import section
    from precision_rl.analysis.progress import grid_progress

    columns = ["scale", "experiment", "precision", "seed", "status", "profile", "last_step", "final_reward",
               "wall_time_s"]
    summary = pd.DataFrame([["tiny", "ladder/synthetic_s3", "fp16", seed, "finished", "quick", 25, 0.4, wall]
                            for seed, wall in ((42, 1800.0), (1, 2200.0))], columns=columns)
    progress = grid_progress(summary)
    planned = int(progress[(progress["scale"] == "tiny") & (progress["family"] == "ladder")]["planned"].sum())
    body = section("ladder", summary, progress=progress)
    assert body.endswith(f"At tiny scale, 2 of the {planned} runs this family plans have finished (1.1 h in all); "
                         f"`make grid EXP='ladder/*' SCALE=tiny` runs the other {planned - 2}, about "
                         f"{(planned - 2) * 2000 / 3600:.1f} h at the median wall time of the family's runs in the "
                         "profile the grid runs (of the scale's, where the family has none).")
