"""Grader throughput on the shared evaluation answers: correct, wrong-integer and wrong-symbolic responses.

Prints responses per second for each kind, cold (no memo) and warm (memoised verdicts), then the time of hostile
answers (a 32,000-character box of ``\\text{a}`` through the Hendrycks normalisation alone, and whole grading calls on
a 200 kB box and a 5,000-digit number), as ``make bench-grader``.
"""

from __future__ import annotations

import time

from precision_rl.paths import shared_data_dir
from precision_rl.reward import grader
from precision_rl.reward.normalize import mathd_normalize


def _answers() -> tuple[list[str], list[str]]:
    """Return (all answers, the integer ones: AMC and AIME)."""
    from datasets import load_from_disk

    suite = load_from_disk(str(shared_data_dir() / "evaluation_suite"))
    integers = [str(int(a)) for a in suite["amc"]["answer"]] + list(suite["aime"]["answer"])
    return [str(a) for a in suite["math"]["answer"]] + integers, integers


def _rate(responses: list[str], truths: list[str]) -> float:
    start = time.perf_counter()
    grader.grade_batch(responses, truths, "r1_distill_qwen")
    return len(responses) / (time.perf_counter() - start)


def main() -> None:
    """Print the grader's responses/second on four kinds of responses."""
    truths, integers = _answers()
    wrap = "thinking...</think> The answer is \\boxed{{{}}}.".format
    kinds = {
        "correct (same string)": ([wrap(t) for t in truths], truths),
        "wrong, neighbour's answer": ([wrap(truths[(i + 1) % len(truths)]) for i in range(len(truths))], truths),
        "wrong integer vs integer truth": ([wrap(str(i + 10_000)) for i in range(len(integers))], integers),
        "no box (format failure)": (["thinking...</think> no answer"] * len(truths), truths),
    }
    for name, (responses, truths) in kinds.items():
        grader.clear_verdicts()
        cold = _rate(responses, truths)
        warm = _rate(responses, truths)
        print(f"{name:<34} n={len(responses):<5} cold {cold:8.1f}/s   memoised {warm:9.1f}/s")
    hostile()


def hostile() -> None:
    """Print the seconds that hostile answers take: normalisation alone, and whole grading calls (score 0 each)."""
    box = "\\text{a}" * 4000
    start = time.perf_counter()
    mathd_normalize(box)
    label = "normalise a 32,000-char \\text box"
    print(f"{label:<34} {time.perf_counter() - start:8.2f} s")
    wrap = "thinking...</think> The answer is \\boxed{{{}}}.".format
    for name, answer, truth in (("grade a 200 kB \\text box", "\\text{a}" * 25000, "a"),
                                ("grade a 5,000-digit number", "9" * 5000, "7")):
        grader.clear_verdicts()
        start = time.perf_counter()
        result = grader.grade(wrap(answer), truth, "r1_distill_qwen")
        print(f"{name:<34} {time.perf_counter() - start:8.2f} s   score {result.score}")


if __name__ == "__main__":
    main()
