"""The tiny scale's profiles: quick stops the calibrated run after ``quick_steps``; calibrated runs it whole."""

import pytest

from precision_rl import cli
from precision_rl.config.profiles import CALIBRATED, DEFAULT_PROFILE, PAPER_PROFILE, QUICK, check_profile, profile_for
from precision_rl.config.registry import SpecError, load_all, load_experiment, validate
from precision_rl.errors import UserError


def test_quick_stops_the_sanity_run_after_its_first_validation_and_calibrated_runs_it_whole():
    spec = load_experiment("sanity/grpo", "tiny")
    quick, whole = profile_for(spec, QUICK), profile_for(spec, CALIBRATED)
    assert DEFAULT_PROFILE == QUICK and spec.quick_steps == 25
    assert spec.quick_steps % spec.hyper.test_freq == 0  # its last step is a validation step of the calibrated run
    assert quick.overrides() == ["+trainer.stop_after_step=25", "trainer.save_freq=5"] and quick.last_step(spec) == 25
    assert whole.overrides() == [] and whole.last_step(spec) == 300
    assert quick.record() == {"name": "quick", "stop_after_step": 25}


def test_every_tiny_training_run_is_the_instrument_with_its_quick_stop():
    trained = [s for s in load_all("tiny").values() if not s.hyper.val_only]
    assert {s.name: s.quick_steps for s in trained} == {s.name: 25 for s in trained}
    assert {"lora/grpo_token_tis", "moe/grpo_seq_mis", "octothinker/grpo", "dense14b/dapo"} <= {s.name for s in trained}
    # what makes runs of one instrument comparable panel to panel: model, set, batch, schedule and validation
    shape = ("train_batch_size", "ppo_mini_batch_size", "rollout_n", "max_response_length", "lr_scheduler_type",
             "total_training_steps", "test_freq", "val_n", "val_temperature", "val_top_p", "temperature")

    def instrument(spec):
        return (spec.model, spec.data, spec.template) + tuple(getattr(spec.hyper, k) for k in shape)

    reference = instrument(load_experiment("sanity/grpo", "tiny"))
    assert {s.name: instrument(s) for s in trained} == {s.name: reference for s in trained}


def test_experiments_without_quick_steps_and_the_paper_scale_run_whole():
    evaluation = load_experiment("eval/inference_precision_8k", "tiny")
    assert evaluation.quick_steps is None and profile_for(evaluation, QUICK).overrides() == []
    paper = load_experiment("sanity/grpo", "paper")
    assert paper.quick_steps is None and profile_for(paper, QUICK).name == PAPER_PROFILE


def test_an_unknown_profile_is_one_line_listing_the_profiles(capsys):
    with pytest.raises(UserError, match="unknown PROFILE 'fast': choose one of quick, calibrated"):
        check_profile("fast")
    assert cli.main(["run", "sanity/grpo", "--scale", "tiny", "--profile", "fast", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: unknown PROFILE 'fast'")


def test_the_quick_stop_must_come_before_the_run_s_end():
    from precision_rl.config.registry import EXPERIMENTS_DIR, load_raw

    doc = load_raw(EXPERIMENTS_DIR / "sanity" / "grpo.yaml")
    doc["scales"]["tiny"]["quick_steps"] = 300
    with pytest.raises(SpecError, match="quick_steps"):
        validate(doc, "sanity/grpo", "experiments/sanity/grpo.yaml", "tiny")


def test_the_quick_checkpoint_frequency_must_divide_the_quick_stop():
    from precision_rl.config.registry import EXPERIMENTS_DIR, load_raw

    doc = load_raw(EXPERIMENTS_DIR / "sanity" / "grpo.yaml")
    doc["scales"]["tiny"]["quick_save_freq"] = 4
    with pytest.raises(SpecError, match="quick_save_freq.*must divide quick_steps"):
        validate(doc, "sanity/grpo", "experiments/sanity/grpo.yaml", "tiny")


def test_every_quick_run_checkpoints_its_last_step():
    """RESUME=1 PROFILE=calibrated continues a quick run from its last step's checkpoint."""
    for spec in load_all("tiny").values():
        quick = profile_for(spec, QUICK)
        if quick.stop_after_step is not None:
            assert quick.save_freq and quick.stop_after_step % quick.save_freq == 0, spec.name


def _rendered_save_freq(out: str) -> str:
    """Return the value of the last trainer.save_freq override a dry run printed (the one verl keeps)."""
    return [word for word in out.split() if word.startswith("trainer.save_freq=")][-1].split("=", 1)[1]


def test_a_dry_run_renders_the_stop_and_the_checkpoints_in_the_quick_profile_only(capsys):
    for profile, stops, save_freq in ((QUICK, True, "5"), (CALIBRATED, False, "25")):
        assert cli.main(["run", "sanity/grpo", "--scale", "tiny", "--precision", "fp16", "--profile", profile,
                         "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert ("+trainer.stop_after_step=25" in out) is stops
        assert _rendered_save_freq(out) == save_freq
