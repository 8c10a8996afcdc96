"""The tiny scale's two profiles, one question each.

*quick* (the default) answers "does my run reproduce the committed curve" within a newcomer's patience; *calibrated*
answers the sanity criterion (a training reward of at least 0.95 on every seed). A quick run is the first
``quick_steps`` steps (``scales.tiny.quick_steps`` of the experiment) of the calibrated run of its seed: the same
model, set, batch, learning-rate schedule and validation, stopped early by the trainer
(``verl_ext.settings.STOP_AFTER_STEP_KEY``). The calibrated runs' first steps are therefore its committed band, and
``RESUME=1 PROFILE=calibrated`` continues a quick run to the whole run. An experiment without ``quick_steps`` runs
whole in either profile; the paper scale has no profiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_rl.config.registry import ExperimentSpec
from precision_rl.config.scale import TINY
from precision_rl.errors import UserError
from precision_rl.verl_ext.settings import STOP_AFTER_STEP_KEY

QUICK, CALIBRATED = "quick", "calibrated"
PROFILES = (QUICK, CALIBRATED)
DEFAULT_PROFILE = QUICK
PAPER_PROFILE = "paper"  # what a paper-scale run records: it runs the experiment whole


@dataclass(frozen=True)
class Profile:
    """The profile a run uses: its name and the step it stops after (None: the run's last step)."""

    name: str
    stop_after_step: int | None

    def overrides(self) -> list[str]:
        """Return the verl overrides of the profile (the trainer's stop, where it stops early)."""
        return [] if self.stop_after_step is None else [f"+{STOP_AFTER_STEP_KEY}={self.stop_after_step}"]

    def last_step(self, spec: ExperimentSpec) -> int | None:
        """Return the last step a run of ``spec`` in this profile trains (None where the spec sets no step count)."""
        return self.stop_after_step or spec.hyper.total_training_steps

    def record(self) -> dict:
        """Return the profile as a manifest records it."""
        return {"name": self.name, "stop_after_step": self.stop_after_step}


def check_profile(name: str) -> str:
    """Return ``name`` when it is a profile, else raise a UserError listing them."""
    if name not in PROFILES:
        raise UserError(f"unknown PROFILE {name!r}: choose one of {', '.join(PROFILES)} (default {DEFAULT_PROFILE})")
    return name


def profile_for(spec: ExperimentSpec, name: str) -> Profile:
    """Return the profile ``name`` of ``spec`` at its scale: the quick profile stops after ``spec.quick_steps`` at tiny
    scale; every other case runs whole (a paper-scale run records the profile ``paper``)."""
    check_profile(name)
    if spec.scale != TINY:
        return Profile(PAPER_PROFILE, None)
    return Profile(name, spec.quick_steps if name == QUICK else None)
