"""Hostile model outputs and odd ground truths: every call returns a score, within a bounded time, and never raises.

verl calls ``compute_score`` inside a training step, so an exception there aborts the step. The bound on time is
generous (each of the grader's three steps has a 1 s limit): it catches a grader that runs unbounded, not a slow CPU.
"""

import dataclasses
import gc
import logging
import threading
import time
import tracemalloc

import cachetools
import pytest

from precision_rl.reward import grader
from precision_rl.reward.normalize import mathd_normalize
from precision_rl.verl_ext.score import compute_score

CALL_LIMIT_S = 10.0


def boxed(answer: str) -> str:
    """Return an r1-distill response whose final answer is ``answer``."""
    return "reasoning </think> so the answer is \\boxed{" + answer + "}"


# (case, response, ground truth, expected score)
ADVERSARIAL = [
    ("huge number, equal", boxed("9" * 5000), "9" * 5000, 1.0),
    ("huge number, not equal", boxed("9" * 5000), "7", 0.0),
    ("huge number vs a fraction", boxed("9" * 5000), r"\frac{1}{2}", 0.0),
    ("huge negative decimal", boxed("-" + "1" * 4400 + ".5"), "-1.5", 0.0),
    ("200 kB box of repeated \\text{a}", boxed(r"\text{a}" * 25000), "a", 0.0),
    ("deep brace nesting", boxed("{" * 50000 + "7" + "}" * 50000), "8", 0.0),
    ("deep fraction nesting", boxed(r"\frac{" * 3000 + "1" + "}{2}" * 3000), "1", 0.0),
    ("tower of powers", boxed("2^{10^{10^{10}}}"), "4", 0.0),
    ("unclosed box", r"x </think> \boxed{\frac{1}{2}", r"\frac12", 0.0),
    ("unclosed braces inside", boxed(r"\frac{1}{2" + "{" * 1000), r"\frac12", 0.0),
    ("unicode pi", boxed("π"), r"\pi", 1.0),
    ("emoji", boxed("\U0001F642"), "5", 0.0),
    ("lone surrogate", boxed("\ud800"), "4", 0.0),
    ("null byte in the answer", boxed("4\x00"), "5", 0.0),
    ("null bytes everywhere", "\x00" * 1000 + "</think>\x00\\boxed{\x00}", "0", 0.0),
    ("no response", None, "4", 0.0),
    ("bytes response", b"</think> \\boxed{4}", "4", 1.0),
    ("int ground truth", boxed("4"), 4, 1.0),
    ("float ground truth", boxed("4"), 4.0, 1.0),
    ("NaN ground truth", boxed("4"), float("nan"), 0.0),
    ("no ground truth", boxed("4"), None, 0.0),
    ("list of ground truths", boxed("4"), ["3", "4"], 1.0),
    ("dict ground truth", boxed("4"), {"a": 1}, 0.0),
    ("object ground truth", boxed("4"), object(), 0.0),
    ("undecodable bytes ground truth", boxed("4"), b"\xff\xfe", 0.0),
]


@pytest.mark.parametrize("response, truth, expected", [c[1:] for c in ADVERSARIAL], ids=[c[0] for c in ADVERSARIAL])
def test_adversarial_input_gets_a_score_in_bounded_time(response, truth, expected):
    start = time.monotonic()
    out = compute_score("math", response, truth)
    assert time.monotonic() - start < CALL_LIMIT_S
    assert out["score"] == expected
    assert isinstance(out["pred"], str)


def test_adversarial_inputs_from_a_worker_thread():
    """verl grades from a thread pool: the checks then run in worker processes, with the same verdicts."""
    results = {}

    def grade_all():
        for name, response, truth, _ in ADVERSARIAL:
            start = time.monotonic()
            results[name] = (compute_score("math", response, truth)["score"], time.monotonic() - start)

    thread = threading.Thread(target=grade_all)
    thread.start()
    thread.join(timeout=CALL_LIMIT_S * len(ADVERSARIAL))
    assert not thread.is_alive()
    assert {name: score for name, (score, _) in results.items()} == {c[0]: c[3] for c in ADVERSARIAL}
    assert max(seconds for _, seconds in results.values()) < CALL_LIMIT_S


def test_an_exception_inside_a_check_scores_zero_with_a_logged_reason(monkeypatch, caplog):
    def broken(pred, truth):
        raise ZeroDivisionError("check blew up")

    rules = grader.GRADERS["oat"]
    monkeypatch.setitem(grader.GRADERS, "oat", dataclasses.replace(rules, checks=(broken, *rules.checks[1:])))
    monkeypatch.setattr(grader, "_logged_reasons", set())
    with caplog.at_level(logging.WARNING, logger=grader.__name__):
        result = grader.grade(boxed("x+1"), "1+x+0*y", "r1_distill_qwen")
    assert (result.score, result.acc) == (0.0, False)
    assert result.error == "ZeroDivisionError: check blew up"
    assert "ZeroDivisionError: check blew up" in caplog.text


def test_an_unusable_ground_truth_is_reported_not_raised(caplog):
    with caplog.at_level(logging.WARNING, logger=grader.__name__):
        result = grader.grade(boxed("4"), b"\xff\xfe", "r1_distill_qwen")
    assert result.score == 0.0 and result.error.startswith("UnicodeDecodeError")


def test_normalisation_scales_linearly():
    r"""An 8x longer answer costs about 8x, not 64x (the lazy ``\text{...}$`` pattern was quadratic). The bar sits
    at 24x, a factor 3 from both, and the sizes alternate so that a loaded machine slows both alike."""
    def cost(n: int) -> float:
        text = r"\text{a}" * n + " x"  # no match at the end: the quadratic pattern tried every \text{ in turn
        start = time.perf_counter()
        mathd_normalize(text)
        return time.perf_counter() - start

    cost(500)
    small, large = [], []
    for _ in range(5):
        small.append(cost(1000))
        large.append(cost(8000))
    assert min(large) < 24 * min(small), (min(small), min(large))


def test_verdict_memo_does_not_keep_answer_strings():
    """100 distinct 4 kB answers, graded then dropped, leave ~15 kB behind (the memo's digests), not their 400 kB."""
    assert grader.answers_equal("1" + "0" * 3996, "7") is False  # imports and first-call caches outside the count
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    answers = [str(i) + "0" * 3996 for i in range(2, 102)]
    for answer in answers:
        assert grader.answers_equal(answer, "7") is False
    del answer, answers
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # Only what this file's answers and the memo's own code hold: a lazy import or a library's cache that a slow,
    # timed-out check fills (sympy, the LaTeX parser) is not the memo.
    memo_files = {__file__, grader.__file__, cachetools.__file__}
    kept = sum(stat.size_diff for stat in after.compare_to(before, "filename")
               if stat.traceback[0].filename in memo_files)
    assert kept < 100 * 400, kept
    assert grader._VERDICTS.maxsize == grader.VERDICT_CACHE_ENTRIES
