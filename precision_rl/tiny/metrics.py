"""Per-step metrics the tiny trainer adds to verl's own (verl's names; additions under mismatch/ and precision/)."""

from __future__ import annotations

import numpy as np
import torch

from precision_rl.metrics import LOSS_SCALE, PROBS_DIFF_MAX, PROBS_DIFF_MIN, SKIPPED_STEPS


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return values[mask.bool()]


def step_metrics(scores: np.ndarray, mask: torch.Tensor, old_logp: torch.Tensor, rollout_logp: torch.Tensor,
                 entropy: torch.Tensor, advantages: torch.Tensor, samples, max_response_length: int,
                 loss_agg_mode: str) -> dict[str, float]:
    """Return reward, length, entropy, advantage and signed-mismatch metrics of one step."""
    lengths = mask.sum(-1).numpy()
    diff = _masked(old_logp.exp() - rollout_logp.exp(), mask)
    adv = _masked(advantages, mask)
    valid = bool(mask.sum() > 0)
    return {
        "critic/score/mean": float(scores.mean()), "critic/score/max": float(scores.max()),
        "critic/score/min": float(scores.min()), "critic/rewards/mean": float(scores.mean()),
        "critic/advantages/mean": float(adv.mean()) if valid else float("nan"),
        "critic/advantages/max": float(adv.max()) if valid else float("nan"),
        "critic/advantages/min": float(adv.min()) if valid else float("nan"),
        "response_length/mean": float(lengths.mean()), "response_length/max": float(lengths.max()),
        "response_length/min": float(lengths.min()),
        "response_length/clip_ratio": float(np.mean([s.truncated for s in samples])),
        "actor/entropy": float(_masked(entropy, mask).mean()) if valid else float("nan"),
        PROBS_DIFF_MAX: float(diff.max()) if valid else float("nan"),
        PROBS_DIFF_MIN: float(diff.min()) if valid else float("nan"),
    }


def precision_metrics(loss_scale: float, skipped_steps: int) -> dict[str, float]:
    """Return the loss scale and the running count of overflow-skipped optimizer steps."""
    return {LOSS_SCALE: loss_scale, SKIPPED_STEPS: float(skipped_steps)}
