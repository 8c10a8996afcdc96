"""Grader throughput on the shared evaluation answers: correct, wrong-integer and wrong-symbolic responses.

Prints responses per second for each kind, cold (no memo) and warm (memoised verdicts), as ``make bench-grader``.
"""

from __future__ import annotations

import time

from precision_rl.data.sources import shared_data_dir
from precision_rl.reward import grader


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
        grader._equal_cached.cache_clear()
        cold = _rate(responses, truths)
        warm = _rate(responses, truths)
        print(f"{name:<34} n={len(responses):<5} cold {cold:8.1f}/s   memoised {warm:9.1f}/s")


if __name__ == "__main__":
    main()
