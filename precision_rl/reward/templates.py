"""Prompt templates the paper used (oat ``r1_distill_qwen``, ``qwen_math``, ``r1``) and how each is graded.

``chat_prompt`` gives verl's ``prompt`` chat list (the model's own chat template is applied by verl/vLLM, unless the
template names its own ``chat_template``); ``raw`` gives oat's exact text for tools that bypass chat templates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from precision_rl.errors import UserError
from precision_rl.reward.extract import Extraction, extract_answer_tags, extract_boxed, extract_r1_distill

R1_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
R1_PREAMBLE = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. The Assistant "
    "first thinks about the reasoning process in the mind and then provides the User with the answer. The reasoning "
    "process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>."
)


@dataclass(frozen=True)
class Template:
    """One prompt template: how to ask a question and how to pull the answer out of a response."""

    name: str
    messages: Callable[[str], list[dict[str, str]]]
    raw: Callable[[str], str]
    extract: Callable[[str], Extraction]
    stop: tuple[str, ...] = ()  # generation ends after any of these strings, which stay in the response
    chat_template: str | None = None  # replaces the model's chat template in verl (None: the model's own)


def _r1_distill_messages(q: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{q} {R1_INSTRUCTION}"}]


def _r1_distill_raw(q: str) -> str:
    return f"<｜begin▁of▁sentence｜><｜User｜>{q} {R1_INSTRUCTION}\n<｜Assistant｜><think>\n"


def _qwen_math_messages(q: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": R1_INSTRUCTION}, {"role": "user", "content": q}]


def _qwen_math_raw(q: str) -> str:
    return f"<|im_start|>system\n{R1_INSTRUCTION}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"


def _r1_messages(q: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{R1_PREAMBLE}\nUser: {q}\nAssistant: <think>"}]


def _r1_raw(q: str) -> str:
    return f"{R1_PREAMBLE}\nUser: {q}\nAssistant: <think>"


# The prompt text as it stands, after the tokenizer's BOS token when it has one: what oat feeds vLLM for a template
# written out in full (``apply_default_chat_template=False``, ``oat/main.py`` ``ZeroMathArgs``), where vLLM's
# tokenizer adds the BOS token.
RAW_CHAT_TEMPLATE = "{% if bos_token %}{{ bos_token }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"

TEMPLATES: dict[str, Template] = {
    "r1_distill_qwen": Template("r1_distill_qwen", _r1_distill_messages, _r1_distill_raw, extract_r1_distill),
    "qwen_math": Template("qwen_math", _qwen_math_messages, _qwen_math_raw, extract_boxed),
    # oat stops r1 samples (training and evaluation) at "</answer>" and keeps it (oat/main.py ZeroMathActor.init).
    "r1": Template("r1", _r1_messages, _r1_raw, extract_answer_tags, stop=("</answer>",),
                   chat_template=RAW_CHAT_TEMPLATE),
}


def get_template(name: str) -> Template:
    """Return the template called ``name``, or raise a UserError listing the known ones."""
    try:
        return TEMPLATES[name]
    except (KeyError, TypeError):
        raise UserError(f"unknown prompt template {name!r}: choose one of {', '.join(TEMPLATES)}") from None


def chat_prompt(question: str, template: str) -> list[dict[str, str]]:
    """Return verl's ``prompt`` column for ``question``: a chat list built with ``template``."""
    return get_template(template).messages(question)


def question_from_prompt(prompt: list[dict[str, str]] | str) -> str:
    """Return the bare question inside a prompt built by any template here (or an already bare string)."""
    if isinstance(prompt, str):
        text = prompt
    else:
        users = [m["content"] for m in prompt if m.get("role") == "user"]
        if not users:
            raise UserError("a prompt chat list has no user turn")
        text = users[-1]
    text = text.strip()
    if text.startswith(R1_PREAMBLE):
        text = text[len(R1_PREAMBLE):].strip().removeprefix("User:").strip()
        text = text.removesuffix("<think>").strip().removesuffix("Assistant:").strip()
    for instruction in (R1_INSTRUCTION, R1_INSTRUCTION.rstrip(".")):
        if text.endswith(instruction):
            text = text[: -len(instruction)].strip()
    return text
