"""Per-step training/inference mismatch metrics that verl 0.9.1 does not log itself, and the responses behind a
step's extreme mismatch."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from precision_rl.metrics import ABS_LOG_RATIO_MEDIAN, PROBS_DIFF_MAX, PROBS_DIFF_MIN, SEQUENCE_KL, SEQUENCE_KL_K3


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


def abs_log_ratio_median(policy_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                         response_mask: torch.Tensor) -> dict[str, float]:
    """Return the median over response tokens of |log π − log μ| (``mismatch/abs_log_ratio_median``; of an even
    count the lower of the two middle values, as ``torch.median`` takes it, with no size limit at paper scale); NaN
    without tokens."""
    mask = response_mask.bool()
    if not mask.any():
        return {ABS_LOG_RATIO_MEDIAN: float("nan")}
    gap = (policy_log_probs.float() - rollout_log_probs.float())[mask].abs()
    return {ABS_LOG_RATIO_MEDIAN: float(gap.median())}


def sequence_kl(policy_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                response_mask: torch.Tensor) -> dict[str, float]:
    """Return the per-sequence KL[μ‖π] of a batch sampled from μ, two ways: the paper's (``mismatch/sequence_kl_mean``,
    the mean over responses of Σ_t (log μ − log π)) and by k3 (``mismatch/sequence_kl_k3_mean``, the mean over
    responses of Σ_t (π/μ − 1) − log(π/μ)); responses without tokens are left out, NaN when none has any."""
    mask = response_mask.bool()
    rows = mask.any(dim=1)
    if not rows.any():
        return {SEQUENCE_KL: float("nan"), SEQUENCE_KL_K3: float("nan")}
    zero = torch.zeros((), dtype=torch.float32)
    log_ratio = torch.where(mask, policy_log_probs.float() - rollout_log_probs.float(), zero)  # log π/μ
    k3 = torch.where(mask, torch.expm1(log_ratio) - log_ratio, zero)
    return {SEQUENCE_KL: float((-log_ratio).sum(dim=1)[rows].mean()), SEQUENCE_KL_K3: float(k3.sum(dim=1)[rows].mean())}


def extreme_responses(policy_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor,
                      responses: torch.Tensor, threshold: float, limit: int) -> list[dict]:
    """Return, worst first, at most ``limit`` responses holding a token whose |π − μ| exceeds ``threshold``.

    Each is a dict: ``row`` (position in the batch), ``position`` of its worst token, ``pi`` and ``mu`` there, and
    the response's ``response_ids``, ``pi_per_token`` and ``mu_per_token`` over its unmasked tokens. The tensors are
    verl's padded [batch, response length] ones.
    """
    mask = response_mask.bool()
    pi, mu = policy_log_probs.float().exp(), rollout_log_probs.float().exp()
    gap = torch.where(mask, (pi - mu).abs(), torch.zeros_like(pi))
    worst_gap, worst_position = gap.max(dim=1)
    rows = [int(r) for r in torch.argsort(worst_gap, descending=True) if worst_gap[r] > threshold][:limit]
    out = []
    for row in rows:
        kept = mask[row]
        position = int(worst_position[row])
        out.append({"row": row, "position": position, "pi": float(pi[row, position]), "mu": float(mu[row, position]),
                    "response_ids": responses[row][kept].tolist(),
                    "pi_per_token": [round(float(p), 6) for p in pi[row][kept]],
                    "mu_per_token": [round(float(m), 6) for m in mu[row][kept]]})
    return out


def append_extremes(path: str | Path, step: int, records: list[dict], prompt_ids: list[list[int]],
                    dataset_rows: list[int]) -> int:
    """Append one JSON line per record of ``extreme_responses`` to ``path``, with the training ``step``, the
    response's ``prompt_ids`` and its ``dataset_row``; return how many lines were written."""
    with open(path, "a") as fh:
        for record, prompt, dataset_row in zip(records, prompt_ids, dataset_rows, strict=True):
            fh.write(json.dumps({"step": step, "dataset_row": dataset_row, "prompt_ids": prompt, **record}) + "\n")
    return len(records)
