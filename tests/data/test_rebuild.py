"""Sanity-set rebuild: the success-band filter, success rates from graded samples, and one tiny vLLM run."""

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from precision_rl.data.rebuild import prompt_texts, rebuild_sanity, select_by_success
from precision_rl.data.sources import Problem
from precision_rl.errors import UserError
from precision_rl.tiny.problems import make_problems

PROBLEMS = [Problem(f"q{i}", str(i)) for i in range(6)]


def test_filter_keeps_the_inclusive_band_and_records_the_rate():
    rates = [0.0, 0.2, 0.5, 0.8, 0.825, 1.0]
    kept = select_by_success(PROBLEMS, rates, 0.2, 0.8)
    assert [p.question for p in kept] == ["q1", "q2", "q3"]
    assert [p.extra["success_rate"] for p in kept] == [0.2, 0.5, 0.8]
    assert select_by_success(PROBLEMS, [8 / 40] * 6, 0.2, 0.8) == [Problem(p.question, p.answer) for p in PROBLEMS]
    with pytest.raises(UserError, match="success band"):
        select_by_success(PROBLEMS, rates, 0.9, 0.1)


@dataclass
class _Completion:
    text: str
    finish_reason: str = "stop"


@dataclass
class _Output:
    outputs: list


class _ScriptedLLM:
    """A vLLM stand-in that answers each prompt with scripted completions (right answer for the first few)."""

    def __init__(self, n_right: dict[str, int], truncate_right: bool = False):
        self.n_right, self.truncate_right, self.seen = n_right, truncate_right, None

    def get_tokenizer(self):
        class Tok:
            chat_template = None
        return Tok()

    def generate(self, prompts, params, use_tqdm=True):
        self.seen = (prompts, params)
        out = []
        for _prompt, problem in zip(prompts, PROBLEMS, strict=False):
            right = self.n_right[problem.question]
            done = [_Completion(f"...</think> \\boxed{{{problem.answer}}}",
                                "length" if self.truncate_right else "stop") for _ in range(right)]
            out.append(_Output(done + [_Completion("...</think> \\boxed{-1}")] * (params.n - right)))
        return out


def test_rates_come_from_graded_samples_and_truncated_answers_count_as_wrong():
    pytest.importorskip("vllm")
    llm = _ScriptedLLM({"q0": 0, "q1": 1, "q2": 2, "q3": 4, "q4": 5, "q5": 3})
    result = rebuild_sanity("unused", PROBLEMS, k=5, low=0.2, high=0.8, template="r1_distill_qwen", llm=llm)
    assert result.rates == [0.0, 0.2, 0.4, 0.8, 1.0, 0.6]
    assert [p.question for p in result.kept] == ["q1", "q2", "q3", "q5"]
    prompts, params = llm.seen
    assert params.n == 5 and params.temperature == 1.0
    assert prompts[0].endswith("<｜Assistant｜><think>\n")  # no chat template: the template's raw text
    truncated = rebuild_sanity("unused", PROBLEMS, k=5, llm=_ScriptedLLM({p.question: 3 for p in PROBLEMS}, True))
    assert truncated.rates == [0.0] * 6 and truncated.kept == []


def test_bad_arguments_are_user_errors():
    with pytest.raises(UserError, match="k must be"):
        rebuild_sanity("m", PROBLEMS, k=0)
    with pytest.raises(UserError, match="no problems"):
        rebuild_sanity("m", [], k=2)


@pytest.mark.slow
def test_tiny_random_model_through_vllm(tiny_random_model, monkeypatch, tmp_path):
    """A random model answers nothing right: every rate is 0 and the [0.2, 0.8] band keeps nothing."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problems = [Problem(p.question, p.answer) for p in make_problems(3, seed=7)]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_random_model))
    assert prompt_texts(tok, ["What is 1 + 2?"], "r1_distill_qwen")[0].endswith("<|im_start|>assistant\n<think>\n")
    temp = Path(tempfile.gettempdir())
    sockets_before = {p.name for p in temp.iterdir() if p.is_socket()}
    result = rebuild_sanity(str(tiny_random_model), problems, k=2, max_tokens=8, dtype="bfloat16", seed=0,
                            max_model_len=256)
    assert not {p.name for p in temp.iterdir() if p.is_socket()} - sockets_before, "vLLM left its IPC sockets"
    assert result.rates == [0.0, 0.0, 0.0]
    assert result.kept == []
    loose = select_by_success(problems, result.rates, 0.0, 1.0)
    assert [p.question for p in loose] == [p.question for p in problems]
