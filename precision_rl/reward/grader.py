"""The paper's reward: extract the answer per template, then accept it when any equivalence check says so.

Order (cheapest first): Hendrycks string match; a numeric shortcut when both sides are plain numbers; then sympy
(PRM800K rules) and math-verify, each under ``timeout_s`` (a timeout is "incorrect"). Reward is 1/0; a response cut
at the length cap scores 0. Verdicts for (answer, ground truth) pairs are memoised, since a batch of samples of the
same prompt repeats answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from precision_rl.reward.equivalence import math_verify_equal, mathd_equal, sympy_equal, warm_up
from precision_rl.reward.extract import last_boxed
from precision_rl.reward.normalize import mathd_normalize, strip_thousands
from precision_rl.reward.timeout import run_with_timeout
from precision_rl.templates import get_template

DEFAULT_TIMEOUT_S = 1.0  # the paper's grader: 1 s per grading call
_PLAIN_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)")


@dataclass(frozen=True)
class GradeResult:
    """One graded response: reward (1.0/0.0), correctness, the extracted answer, and whether the format held."""

    score: float
    acc: bool
    pred: str | None
    formatted: bool


def _plain_number(text: str | None) -> Fraction | None:
    if text is None:
        return None
    text = strip_thousands(text.strip())
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    return Fraction(text)


def _numeric_verdict(pred: str, truth: str) -> bool | None:
    """Return True/False when both answers are plain numbers and the verdict is certain, else None."""
    a, b = _plain_number(mathd_normalize(pred)), _plain_number(mathd_normalize(truth))
    if a is None or b is None:
        return None
    if a == b:
        return True
    if a.denominator == 1 and b.denominator == 1:
        return False  # distinct integers: no later check accepts them
    return None


def _truth_strings(ground_truth) -> list[str]:
    if ground_truth is None:
        return []
    if isinstance(ground_truth, (str, bytes)):
        items = [ground_truth]
    elif isinstance(ground_truth, (int, float)):
        items = [ground_truth]
    elif isinstance(ground_truth, Iterable):
        items = list(ground_truth)
    else:
        items = [ground_truth]
    out = []
    for item in items:
        if isinstance(item, bytes):
            item = item.decode()
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        text = str(item).strip()
        if "\\boxed" in text:
            text = last_boxed(text) or text
        if text:
            out.append(text)
    return out


@lru_cache(maxsize=65536)
def _equal_cached(pred: str, truth: str, timeout_s: float) -> bool:
    return _equal(pred, truth, timeout_s, cache=True)


def _equal(pred: str, truth: str, timeout_s: float, cache: bool = False) -> bool:
    if mathd_equal(pred, truth):
        return True
    verdict = _numeric_verdict(pred, truth)
    if verdict is not None:
        return verdict
    warm_up()
    timed_out = False
    for check in (sympy_equal, math_verify_equal):
        finished, equal = run_with_timeout(check, (pred, truth), timeout_s)
        if finished and equal:
            return True
        timed_out |= not finished
    if timed_out and cache:
        raise _Uncacheable
    return False


class _Uncacheable(Exception):
    """A verdict that came from a timeout: valid now, but not to be memoised."""


def answers_equal(pred: str, truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Return whether answer ``pred`` is equivalent to ground truth ``truth`` under the paper's rules."""
    try:
        return _equal_cached(pred, truth, timeout_s)
    except _Uncacheable:
        return False


def grade(response: str, ground_truth, template: str, truncated: bool = False,
          timeout_s: float = DEFAULT_TIMEOUT_S) -> GradeResult:
    """Return the GradeResult of one ``response`` against ``ground_truth`` (a string or a list of acceptable ones)."""
    extraction = get_template(template).extract(response or "")
    if truncated or extraction.pred is None:
        return GradeResult(0.0, False, extraction.pred, extraction.formatted)
    pred = extraction.pred
    correct = any(answers_equal(pred, truth, timeout_s) for truth in _truth_strings(ground_truth))
    return GradeResult(1.0 if correct else 0.0, correct, pred, extraction.formatted)


def grade_batch(responses: Sequence[str], ground_truths: Sequence, template: str,
                truncated: Sequence[bool] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[GradeResult]:
    """Return one GradeResult per response (``ground_truths`` and ``truncated`` are aligned with ``responses``)."""
    if len(ground_truths) != len(responses) or (truncated is not None and len(truncated) != len(responses)):
        raise ValueError("responses, ground_truths and truncated must have the same length")
    flags = truncated if truncated is not None else [False] * len(responses)
    return [grade(r, g, template, bool(t), timeout_s) for r, g, t in zip(responses, ground_truths, flags, strict=True)]
