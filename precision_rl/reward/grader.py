"""The paper's reward: extract the answer per template, then accept it when any equivalence check says so.

Two graders, as the authors' two frameworks grade (docs/sources.md#data):
- ``oat`` (the default): Hendrycks string match and a numeric shortcut when both sides are plain numbers, then sympy
  (PRM800K rules) and math-verify, each step under a 1 s limit; a response cut at the length cap scores 0.
- ``fork`` (the VeRL fork's ``compute_math_score``): the same string match and shortcut, then sympy only, under a
  10 s limit; no math-verify, and a truncated response is graded like any other.

A timeout counts as "incorrect"; reward is 1/0. Whatever goes wrong inside grading (an exception of the grader or
of a library it calls, a crashed worker process) scores 0 and is logged with its reason: ``grade`` never raises, so
one odd response can never abort a training step.

Verdicts for (answer, ground truth) pairs are memoised, since a batch of samples of the same prompt repeats answers.
The memo is keyed by a 16-byte digest of the pair, so each entry has the same small size whatever the answers' length,
and the memo's memory is bounded by ``VERDICT_CACHE_ENTRIES`` entries of that size.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from cachetools import LRUCache

from precision_rl.errors import UserError
from precision_rl.reward.equivalence import math_verify_equal, mathd_equal, sympy_equal, warm_up
from precision_rl.reward.extract import last_boxed
from precision_rl.reward.normalize import mathd_normalize, strip_thousands
from precision_rl.reward.templates import get_template
from precision_rl.reward.timeout import run_with_timeout

VERDICT_CACHE_ENTRIES = 65536
# Python refuses int/str conversions above 4,300 digits (sys.int_info.str_digits_check_threshold); longer numbers
# skip the exact-number shortcut and go to the time-limited checks.
_MAX_PLAIN_NUMBER_CHARS = 4000
_PLAIN_NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)")
_MAX_LOGGED_REASONS = 64

logger = logging.getLogger(__name__)
_logged_reasons: set[str] = set()


@dataclass(frozen=True)
class GraderRules:
    """One grader: the checks run after the cheap string/number match, each check's time limit in seconds, and
    whether a response cut at the length cap scores 0 whatever its answer."""

    checks: tuple[Callable[[str, str], bool], ...]
    timeout_s: float
    zero_truncated: bool


GRADERS = {
    "oat": GraderRules(checks=(sympy_equal, math_verify_equal), timeout_s=1.0, zero_truncated=True),
    "fork": GraderRules(checks=(sympy_equal,), timeout_s=10.0, zero_truncated=False),
}
DEFAULT_GRADER = "oat"


def get_grader(name: str) -> GraderRules:
    """Return the rules of grader ``name``; an unknown name raises a UserError listing the graders."""
    if name not in GRADERS:
        raise UserError(f"unknown grader {name!r}: choose one of {', '.join(GRADERS)}")
    return GRADERS[name]


@dataclass(frozen=True)
class GradeResult:
    """One graded response: reward (1.0/0.0), correctness, the extracted answer, and whether the format held."""

    score: float
    acc: bool
    pred: str | None
    formatted: bool
    error: str | None = None  # why grading failed (the score is then 0), None when it ran through


def _plain_number(text: str | None) -> Fraction | None:
    if text is None:
        return None
    text = strip_thousands(text.strip())
    if len(text) > _MAX_PLAIN_NUMBER_CHARS or not _PLAIN_NUMBER.fullmatch(text):
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


def _cheap_verdict(pred: str, truth: str) -> bool | None:
    """Return True when the Hendrycks forms match, the numeric shortcut's verdict when it is certain, else None."""
    if mathd_equal(pred, truth):
        return True
    return _numeric_verdict(pred, truth)


_VERDICTS: LRUCache = LRUCache(maxsize=VERDICT_CACHE_ENTRIES)
_VERDICTS_LOCK = threading.Lock()  # verl grades from a thread pool; cachetools caches are not thread-safe


def _verdict_key(pred: str, truth: str, grader: str, timeout_s: float) -> bytes:
    blob = f"{grader}\0{timeout_s!r}\0{len(pred)}\0{pred}\0{truth}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(blob, digest_size=16).digest()


def clear_verdicts() -> None:
    """Forget every memoised verdict (benchmarks measure the grader cold)."""
    with _VERDICTS_LOCK:
        _VERDICTS.clear()


def _equal(pred: str, truth: str, rules: GraderRules, timeout_s: float) -> tuple[bool, bool]:
    """Return (equal, certain): ``certain`` is False when a check ran out of time (such a verdict is not memoised)."""
    finished, verdict = run_with_timeout(_cheap_verdict, (pred, truth), timeout_s)
    if finished and verdict is not None:
        return verdict, True
    warm_up()
    timed_out = not finished
    for check in rules.checks:
        finished, equal = run_with_timeout(check, (pred, truth), timeout_s)
        if finished and equal:
            return True, True
        timed_out |= not finished
    return False, not timed_out


def answers_equal(pred: str, truth: str, timeout_s: float | None = None, grader: str = DEFAULT_GRADER) -> bool:
    """Return whether answer ``pred`` is equivalent to ground truth ``truth`` under ``grader``'s rules (each check
    limited to ``timeout_s`` seconds; None: the grader's own limit).

    May raise what a check raises; ``grade`` turns that into a score of 0.
    """
    rules = get_grader(grader)
    limit = rules.timeout_s if timeout_s is None else float(timeout_s)
    key = _verdict_key(pred, truth, grader, limit)
    with _VERDICTS_LOCK:
        verdict = _VERDICTS.get(key)
    if verdict is None:
        verdict, certain = _equal(pred, truth, rules, limit)
        if certain:
            with _VERDICTS_LOCK:
                _VERDICTS[key] = verdict
    return verdict


def _log_failure(reason: str) -> None:
    """Log a grading failure once per distinct reason (at most ``_MAX_LOGGED_REASONS`` per process)."""
    if reason in _logged_reasons or len(_logged_reasons) >= _MAX_LOGGED_REASONS:
        return
    _logged_reasons.add(reason)
    logger.warning("grader failed, the response scores 0: %s", reason)


def _failure_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _as_text(response) -> str:
    if isinstance(response, bytes):
        return response.decode("utf-8", "replace")
    return response if isinstance(response, str) else str(response or "")


def grade(response: str, ground_truth, template: str, truncated: bool = False, timeout_s: float | None = None,
          grader: str = DEFAULT_GRADER) -> GradeResult:
    """Return the GradeResult of one ``response`` against ``ground_truth`` (a string or a list of acceptable ones),
    judged by ``grader`` (``timeout_s`` None: the grader's own time limit per check).

    Never raises on any response or ground truth: a failure inside grading gives a score of 0 with ``error`` set,
    and is logged. Only a configuration error, an unknown ``template`` or ``grader``, raises (``UserError``), before
    any grading.
    """
    extract = get_template(template).extract
    rules = get_grader(grader)
    pred, formatted = None, False
    try:
        extraction = extract(_as_text(response))
        pred, formatted = extraction.pred, extraction.formatted
        if (truncated and rules.zero_truncated) or pred is None:
            return GradeResult(0.0, False, pred, formatted)
        correct = any(answers_equal(pred, truth, timeout_s, grader) for truth in _truth_strings(ground_truth))
        return GradeResult(1.0 if correct else 0.0, correct, pred, formatted)
    except Exception as exc:  # noqa: BLE001 - a grading failure must never escape into the training step
        reason = _failure_reason(exc)
        _log_failure(reason)
        return GradeResult(0.0, False, pred, formatted, error=reason)


def grade_batch(responses: Sequence[str], ground_truths: Sequence, template: str,
                truncated: Sequence[bool] | None = None, timeout_s: float | None = None,
                grader: str = DEFAULT_GRADER) -> list[GradeResult]:
    """Return one GradeResult per response (``ground_truths`` and ``truncated`` are aligned with ``responses``)."""
    if len(ground_truths) != len(responses) or (truncated is not None and len(truncated) != len(responses)):
        raise ValueError("responses, ground_truths and truncated must have the same length")
    flags = truncated if truncated is not None else [False] * len(responses)
    return [grade(r, g, template, bool(t), timeout_s, grader)
            for r, g, t in zip(responses, ground_truths, flags, strict=True)]
