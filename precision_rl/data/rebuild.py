"""Rebuild a "perfectible" sanity set for any model: sample k responses per problem, keep 20-80 % success.

The paper's recipe (40 samples of R1-Distill-Qwen-1.5B per MATH problem, keep success in [0.2, 0.8]); the same
code serves the tiny scale with its own model and generated problems.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from precision_rl.data.sources import Problem
from precision_rl.errors import UserError
from precision_rl.paths import vllm_socket_dir
from precision_rl.reward.grader import grade_batch
from precision_rl.reward.templates import get_template


@dataclass(frozen=True)
class RebuildResult:
    """The kept problems (each with its ``success_rate`` in ``extra``) and every problem's success rate."""

    kept: list[Problem]
    rates: list[float]


def select_by_success(problems: Sequence[Problem], rates: Sequence[float], low: float = 0.2,
                      high: float = 0.8) -> list[Problem]:
    """Return the problems whose success rate lies in ``[low, high]`` (inclusive), annotated with the rate."""
    if len(problems) != len(rates):
        raise ValueError("one success rate per problem")
    if not 0.0 <= low <= high <= 1.0:
        raise UserError(f"success band must satisfy 0 <= low <= high <= 1, got [{low}, {high}]")
    eps = 1e-9
    return [Problem(p.question, p.answer, {**p.extra, "success_rate": r})
            for p, r in zip(problems, rates, strict=True) if low - eps <= r <= high + eps]


def prompt_texts(tokenizer, questions: Sequence[str], template: str) -> list[str]:
    """Return the generation prompts: the template's chat list through the tokenizer's chat template, or the
    template's raw text when the tokenizer has none (base models)."""
    tpl = get_template(template)
    if getattr(tokenizer, "chat_template", None):
        return [tokenizer.apply_chat_template(tpl.messages(q), tokenize=False, add_generation_prompt=True)
                for q in questions]
    return [tpl.raw(q) for q in questions]


def success_rates(llm, problems: Sequence[Problem], k: int, template: str, max_tokens: int, seed: int,
                  temperature: float = 1.0) -> list[float]:
    """Return each problem's fraction of ``k`` sampled responses (vLLM ``llm``, temperature 1) that grade correct."""
    from vllm import SamplingParams

    tpl = get_template(template)
    params = SamplingParams(n=k, temperature=temperature, top_p=1.0, max_tokens=max_tokens,
                            stop=list(tpl.stop) or None, include_stop_str_in_output=bool(tpl.stop))
    prompts = prompt_texts(llm.get_tokenizer(), [p.question for p in problems], template)
    outputs = llm.generate(prompts, params, use_tqdm=True)
    rates = []
    for problem, out in zip(problems, outputs, strict=True):
        texts = [c.text for c in out.outputs]
        truncated = [c.finish_reason == "length" for c in out.outputs]
        results = grade_batch(texts, [problem.answer] * len(texts), template, truncated)
        rates.append(sum(r.acc for r in results) / len(results))
    return rates


def rebuild_sanity(model_path: str, problems: Sequence[Problem], k: int = 40, low: float = 0.2, high: float = 0.8,
                   template: str = "r1_distill_qwen", dtype: str = "bfloat16", max_tokens: int = 8192,
                   seed: int = 0, llm: Any = None, max_model_len: int | None = None) -> RebuildResult:
    """Sample ``k`` responses per problem from ``model_path`` with vLLM at T=1 and return the problems whose
    success rate is within ``[low, high]`` (pass ``llm`` to reuse a running engine)."""
    if k < 1:
        raise UserError(f"k must be at least 1, got {k}")
    if not problems:
        raise UserError("no problems to rebuild a sanity set from")
    get_template(template)
    own_engine = llm is None
    with vllm_socket_dir():
        if own_engine:
            from vllm import LLM

            llm = LLM(model=str(model_path), dtype=dtype, seed=seed, enforce_eager=True,
                      max_model_len=max_model_len, trust_remote_code=False)
        try:
            rates = success_rates(llm, problems, k, template, max_tokens, seed)
        finally:
            if own_engine:  # the engine core is a process of its own: stop it rather than wait for garbage collection
                llm.llm_engine.engine_core.shutdown()
    return RebuildResult(select_by_success(problems, rates, low, high), rates)
