"""Pull the final answer out of a response, per prompt template (the paper's format rules)."""

from __future__ import annotations

from dataclasses import dataclass

THINK_CLOSE = "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
# The r1 (OctoThinker) template asks for "<think> ... </think> <answer> ... </answer>"; oat checks this exact join.
R1_ANSWER_JOIN = f"{THINK_CLOSE} {ANSWER_OPEN}"


@dataclass(frozen=True)
class Extraction:
    """What a response yields: the answer string (None if none) and whether the response obeyed the format."""

    pred: str | None
    formatted: bool


def last_boxed(text: str) -> str | None:
    r"""Return the content of the last ``\boxed{...}`` (or ``\fbox{...}``, or ``\boxed x``) in ``text``, or None.

    Braces nest: ``\boxed{\frac{1}{2}}`` gives ``\frac{1}{2}``. An unclosed box gives None.
    """
    idx = text.rfind("\\boxed")
    name = "\\boxed"
    if idx < 0:
        idx, name = text.rfind("\\fbox"), "\\fbox"
        if idx < 0:
            return None
    start = idx + len(name)
    if text.startswith(" ", start):  # "\boxed 5": the argument runs to the next "$" or space
        rest = text[start + 1:]
        for stop in ("$", " ", "\n"):
            rest = rest.split(stop)[0]
        return rest or None
    if not text.startswith("{", start):
        return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return None


def extract_boxed(response: str) -> Extraction:
    """Return the last boxed answer of ``response``; unformatted when there is none (template ``qwen_math``)."""
    pred = last_boxed(response)
    return Extraction(pred, pred is not None)


def extract_r1_distill(response: str) -> Extraction:
    """Return the last boxed answer after the one ``</think>`` (template ``r1_distill_qwen``).

    Zero or several ``</think>`` make the response unformatted (no answer), as the paper's reward requires.
    """
    parts = response.split(THINK_CLOSE)
    if len(parts) != 2:
        return Extraction(None, False)
    return extract_boxed(parts[1])


def extract_answer_tags(response: str) -> Extraction:
    """Return the answer between ``<answer>`` tags after ``</think> <answer>`` (template ``r1``, OctoThinker).

    A ``\\boxed{}`` inside the tags is unwrapped; tags present but an unclosed box give a formatted, empty answer.
    """
    if R1_ANSWER_JOIN not in response or ANSWER_CLOSE not in response:
        return Extraction(None, False)
    answer = response.split(ANSWER_OPEN)[-1].replace(ANSWER_CLOSE, "")
    if "\\boxed" in answer or "\\fbox" in answer:
        return Extraction(last_boxed(answer), True)
    return Extraction(answer.strip(), True)
