"""The records every log reader produces: a run's identity, its logged values, and the tidy table they make."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from precision_rl.config.precision import PrecisionArm

UNKNOWN = "unknown"
EXTERNAL_STATUS = "external"  # the status of a run read from a wandb export (made elsewhere, drawn as complete)


class LogWarning(UserWarning):
    """Something in the logs was odd but loading went on (truncated line, unknown metric, duplicate run)."""


@dataclass(frozen=True)
class RunInfo:
    """A run's identity and bookkeeping: one row of the runs table."""

    run: str
    scale: str
    experiment: str
    algorithm: str
    precision_train: str
    precision_infer: str
    seed: int
    status: str | None = None
    wall_time_s: float | None = None
    source: str = ""
    created: str = ""
    config: str = UNKNOWN  # runs.configuration_key of the manifest: equal for runs of one configuration
    numerics: str = UNKNOWN  # runs.numerics_key: equal for runs whose arithmetic is the same (GEMMs, CPU flags)
    profile: str = UNKNOWN  # runs.profile_name: quick, calibrated (tiny scale) or paper

    @property
    def precision(self) -> str:
        """Return the run's precision arm label (``fp16`` or ``train_bf16-infer_fp32``)."""
        return PrecisionArm(self.precision_train, self.precision_infer).label


@dataclass
class RunMetrics:
    """One run's logged values in file order: parallel lists of step, metric name and value."""

    info: RunInfo
    steps: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    values: list = field(default_factory=list)


@dataclass
class RunTable:
    """The tidy long table (``metrics``, columns COLUMNS) and one row per run (``runs``, columns RUN_COLUMNS)."""

    metrics: pd.DataFrame
    runs: pd.DataFrame
