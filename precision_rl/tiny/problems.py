"""Generated multi-step arithmetic problems written like the sanity data (question, <think> trace, \\boxed{answer})."""

from __future__ import annotations

import random
from dataclasses import dataclass

from precision_rl.reward.templates import R1_INSTRUCTION

OPS = ("+", "-", "*")


@dataclass(frozen=True)
class ArithmeticProblem:
    """One problem: the question text, its step-by-step trace, and the answer string."""

    question: str
    steps: tuple[str, ...]
    answer: str

    def solution(self) -> str:
        """Return the reference response: the trace, one ``</think>``, then the boxed answer."""
        return "\n".join(self.steps) + f"\n</think>\n\nThe answer is \\boxed{{{self.answer}}}."


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def make_problem(rng: random.Random, n_ops: int, max_operand: int = 9) -> ArithmeticProblem:
    """Return a random left-to-right chain of ``n_ops`` operations, e.g. ``What is (7 + 5) * 2?`` done stepwise.

    Numbers stay small and non-negative (subtraction never goes below 0; only values up to 20 are multiplied,
    by 2 or 3), so that a 3M-parameter model can learn the task to a partial accuracy in minutes.
    """
    value = rng.randint(1, max_operand)
    text, steps = str(value), []
    for _ in range(n_ops):
        ops = [op for op in OPS if not (op == "-" and value < 1) and not (op == "*" and value > 20)]
        op = rng.choice(ops)
        if op == "*":
            operand = rng.randint(2, 3)
        elif op == "-":
            operand = rng.randint(1, min(max_operand, value))
        else:
            operand = rng.randint(1, max_operand)
        new = _apply(value, op, operand)
        steps.append(f"{value} {op} {operand} = {new}")
        text = f"({text} {op} {operand})" if len(steps) < n_ops else f"{text} {op} {operand}"
        value = new
    return ArithmeticProblem(f"What is {text}?", tuple(steps), str(value))


def make_problems(n: int, seed: int, min_ops: int = 2, max_ops: int = 3) -> list[ArithmeticProblem]:
    """Return ``n`` problems (deterministic given ``seed``) with unique questions."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[ArithmeticProblem] = []
    while len(out) < n:
        problem = make_problem(rng, rng.randint(min_ops, max_ops))
        if problem.question not in seen:
            seen.add(problem.question)
            out.append(problem)
    return out


def user_message(problem: ArithmeticProblem) -> str:
    """Return the user turn of the sanity template: the question followed by the R1 instruction."""
    return f"{problem.question} {R1_INSTRUCTION}"
