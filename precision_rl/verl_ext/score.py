"""verl custom reward function: the paper's grader behind verl's ``compute_score`` hook.

verl loads this file by path (``reward.custom_reward_function.path``), so it uses absolute imports only; the
launcher passes the experiment's template as ``reward_kwargs.template``.
"""

from __future__ import annotations

from precision_rl.reward.grader import DEFAULT_TIMEOUT_S, grade


def compute_score(data_source, solution_str, ground_truth, extra_info=None, template="r1_distill_qwen",
                  truncated=None, timeout_s=DEFAULT_TIMEOUT_S, **kwargs) -> dict:
    """Return ``{"score": 1.0|0.0, "acc": bool, "pred": str, "formatted": bool}`` for one response.

    ``ground_truth`` may be a string or a list of acceptable answers. verl's reward manager does not say whether a
    response hit the length cap; pass ``truncated=True`` (or ``extra_info["truncated"]``) where the caller knows.
    """
    if truncated is None:
        truncated = bool((extra_info or {}).get("truncated", False)) if isinstance(extra_info, dict) else False
    result = grade(solution_str, ground_truth, template, truncated=bool(truncated), timeout_s=float(timeout_s))
    # verl gathers extra keys into arrays per batch: keep types stable (pred is "" when nothing was extracted).
    return {"score": result.score, "acc": result.acc, "pred": result.pred or "", "formatted": result.formatted}
