"""The tiny scale's two profiles, one question each.

*quick* (the default) answers "does my run reproduce the committed curve" within a newcomer's patience; *calibrated*
answers the sanity criterion (a training reward of at least 0.95 on every seed). A quick run is the first
``quick_steps`` steps (``scales.tiny.quick_steps`` of the experiment) of the calibrated run of its seed: the same
model, set, batch, learning-rate schedule and validation, stopped early by the trainer
(``verl_ext.settings.STOP_AFTER_STEP_KEY``). The calibrated runs' first steps are therefore its committed band, and
``RESUME=1 PROFILE=calibrated`` continues a quick run to the whole run. A quick run checkpoints every
``quick_save_freq`` steps (``scales.tiny.quick_save_freq``), so that ``RESUME=1`` continues one that was interrupted;
checkpoints change no logged value (tests/verl_ext/test_verl_runs.py reruns with one at every step). An experiment
without ``quick_steps`` runs whole in either profile.

The paper scale runs an experiment whole, or in its *smoke* profile (``PROFILE=smoke``): the experiment's
``profiles.smoke`` changes (one GPU, a few steps, short answers: docs/experiments.md#the-smoke-profile), for checking a
GPU install before a node-week. A smoke run is named apart (``<arm>-smoke``), so it never stands in for a real one.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_rl.config.registry import ExperimentSpec
from precision_rl.config.scale import PAPER, TINY
from precision_rl.errors import UserError
from precision_rl.verl_ext.settings import SAVE_FREQ_KEY, STOP_AFTER_STEP_KEY

QUICK, CALIBRATED = "quick", "calibrated"
PROFILES = (QUICK, CALIBRATED)  # the tiny scale's
DEFAULT_PROFILE = QUICK
PAPER_PROFILE = "paper"  # what a paper-scale run records: it runs the experiment whole
SMOKE = "smoke"
PAPER_PROFILES = (SMOKE,)  # the paper scale's, each a ``profiles.<name>`` block of the experiment


@dataclass(frozen=True)
class Profile:
    """The profile a run uses: its name, the step it stops after (None: the run's last step) and how often it
    checkpoints (None: as the experiment's ``hyper.save_freq`` says)."""

    name: str
    stop_after_step: int | None
    save_freq: int | None = None

    def overrides(self) -> list[str]:
        """Return the verl overrides of the profile: the trainer's stop where it stops early, and its checkpoint
        frequency where it has one of its own (placed after the experiment's, which it replaces)."""
        stop = [] if self.stop_after_step is None else [f"+{STOP_AFTER_STEP_KEY}={self.stop_after_step}"]
        return stop + ([] if self.save_freq is None else [f"{SAVE_FREQ_KEY}={self.save_freq}"])

    def last_step(self, spec: ExperimentSpec) -> int | None:
        """Return the last step a run of ``spec`` in this profile trains (None where the spec sets no step count)."""
        return self.stop_after_step or spec.hyper.total_training_steps

    @property
    def run_suffix(self) -> str:
        """Return what the profile adds to a run's arm label in its name and folder (a smoke run is named apart)."""
        return f"-{self.name}" if self.name in PAPER_PROFILES else ""

    def record(self) -> dict:
        """Return the profile as a manifest records it."""
        return {"name": self.name, "stop_after_step": self.stop_after_step}


def check_profile(name: str) -> str:
    """Return ``name`` when it is a profile, else raise a UserError listing them."""
    if name not in PROFILES + PAPER_PROFILES:
        raise UserError(f"unknown PROFILE {name!r}: choose one of {', '.join(PROFILES)} (tiny scale, default "
                        f"{DEFAULT_PROFILE}) or {', '.join(PAPER_PROFILES)} (paper scale)")
    return name


def registry_profile(name: str, scale: str) -> str | None:
    """Return the ``profiles.<name>`` block the registry applies for PROFILE ``name`` at ``scale`` (None: none, the
    tiny profiles only stop a run early); a paper-scale profile at tiny scale raises a UserError."""
    check_profile(name)
    if name not in PAPER_PROFILES:
        return None
    if scale != PAPER:
        raise UserError(f"PROFILE={name} is a paper-scale profile (GPUs); at {scale} scale choose "
                        f"{' or '.join(PROFILES)}")
    return name


def profile_for(spec: ExperimentSpec, name: str) -> Profile:
    """Return the profile ``name`` of ``spec`` at its scale: the quick profile stops after ``spec.quick_steps`` at tiny
    scale; every other case runs whole (a paper-scale run records the profile ``paper``, or ``smoke``)."""
    check_profile(name)
    if spec.scale != TINY:
        return Profile(name if name in PAPER_PROFILES else PAPER_PROFILE, None)
    if name != QUICK:
        return Profile(name, None)
    return Profile(name, spec.quick_steps, spec.quick_save_freq if spec.quick_steps else None)
