"""verl custom reward function: the paper's grader behind verl's ``compute_score`` hook.

verl loads this file by path (``reward.custom_reward_function.path``), so it uses absolute imports only; the
launcher passes the experiment's template and grader as ``reward_kwargs.template`` and ``reward_kwargs.grader``.
"""

from __future__ import annotations

from precision_rl.reward.grader import DEFAULT_GRADER, grade


def compute_score(data_source, solution_str, ground_truth, extra_info=None, template="r1_distill_qwen",
                  truncated=None, timeout_s=None, grader=DEFAULT_GRADER, **kwargs) -> dict:
    """Return ``{"score": 1.0|0.0, "acc": bool, "pred": str, "formatted": bool}`` for one response.

    ``ground_truth`` may be a string or a list of acceptable answers. verl's reward manager does not say whether a
    response hit the length cap; pass ``truncated=True`` (or ``extra_info["truncated"]``) where the caller knows.
    ``timeout_s`` None keeps the grader's own time limit per check.
    """
    if truncated is None:
        truncated = bool((extra_info or {}).get("truncated", False)) if isinstance(extra_info, dict) else False
    result = grade(solution_str, ground_truth, template, truncated=bool(truncated),
                   timeout_s=None if timeout_s is None else float(timeout_s), grader=str(grader))
    # verl gathers extra keys into arrays per batch: keep types stable (pred is "" when nothing was extracted).
    return {"score": result.score, "acc": result.acc, "pred": result.pred or "", "formatted": result.formatted}
