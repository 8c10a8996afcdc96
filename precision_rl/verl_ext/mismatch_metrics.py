"""Per-step training/inference mismatch metrics that verl 0.9.1 does not log itself."""

from __future__ import annotations

import torch

from precision_rl.metrics import PROBS_DIFF_MAX, PROBS_DIFF_MIN


def signed_probs_diff(policy_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                      response_mask: torch.Tensor) -> dict[str, float]:
    """Return the signed max and min over response tokens of π − μ, the sampled tokens' probabilities under the
    training engine (``policy_log_probs``) and the inference engine (``rollout_log_probs``); NaN without tokens.

    verl logs only |π − μ| (``training/rollout_probs_diff_*``); the paper's Fig. 3 plots both signs.
    """
    mask = response_mask.bool()
    if not mask.any():
        return {PROBS_DIFF_MAX: float("nan"), PROBS_DIFF_MIN: float("nan")}
    diff = (policy_log_probs.float().exp() - rollout_log_probs.float().exp())[mask]
    return {PROBS_DIFF_MAX: float(diff.max()), PROBS_DIFF_MIN: float(diff.min())}
