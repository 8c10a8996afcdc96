"""Which scale a run uses: ``paper`` (verl + vLLM on CUDA GPUs) or ``tiny`` (CPU)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from precision_rl.errors import UserError

PAPER, TINY = "paper", "tiny"
SCALES = (PAPER, TINY)
SCALE_CHOICES = ("auto", *SCALES)


@dataclass(frozen=True)
class ScaleDecision:
    """The scale a run uses, what was asked for, and why."""

    requested: str
    scale: str
    reason: str


def cuda_gpu_count() -> int:
    """Return how many CUDA GPUs torch sees (0 without torch or CUDA)."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - any broken CUDA stack counts as no GPU
        return 0


def paper_scale_problem() -> str | None:
    """Return why the paper scale cannot run on this machine, or None when it can."""
    missing = [m for m in ("verl", "vllm") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (create the GPU environment from environment.yml)"
    if cuda_gpu_count() == 0:
        return "no CUDA GPU found"
    return None


def resolve_scale(requested: str, dry_run: bool = False) -> ScaleDecision:
    """Return the scale for ``requested`` (auto|paper|tiny); paper without GPUs raises unless ``dry_run``."""
    if requested not in SCALE_CHOICES:
        raise UserError(f"unknown SCALE {requested!r}: choose one of {', '.join(SCALE_CHOICES)}")
    if requested == TINY:
        return ScaleDecision(requested, TINY, "asked for")
    problem = paper_scale_problem()
    if requested == PAPER:
        if problem and not dry_run:
            raise UserError(f"SCALE=paper needs CUDA GPUs with verl and vLLM: {problem} "
                            "(use SCALE=tiny on a CPU, or DRY_RUN=1 to print the command)")
        return ScaleDecision(requested, PAPER, "asked for" + (f"; dry run, {problem}" if problem else ""))
    if problem is None:
        return ScaleDecision(requested, PAPER, "CUDA GPUs, verl and vLLM found")
    return ScaleDecision(requested, TINY, problem)
