"""Tiny problems are graded correctly by the paper's grader, and the tiny model loads with the R1-style template."""

import random

from precision_rl.reward.grader import grade
from precision_rl.tiny.model import TinyModelConfig
from precision_rl.tiny.problems import make_problem, make_problems, user_message


def test_problems_are_deterministic_and_unique():
    a, b = make_problems(50, seed=3), make_problems(50, seed=3)
    assert a == b and len({p.question for p in a}) == 50
    assert make_problems(50, seed=4) != a


def test_trace_is_correct_arithmetic():
    for p in make_problems(200, seed=1):
        value = None
        for step in p.steps:
            lhs, rhs = step.split(" = ")
            if value is not None:
                assert lhs.split(" ")[0] == str(value)
            assert eval(lhs) == int(rhs)  # noqa: S307 - digits and + - * only
            value = int(rhs)
        assert str(value) == p.answer


def test_reference_solutions_score_one_and_wrong_answers_zero():
    for p in make_problems(30, seed=2):
        assert grade(p.solution(), p.answer, "r1_distill_qwen").score == 1.0
        wrong = p.solution().replace(f"\\boxed{{{p.answer}}}", f"\\boxed{{{int(p.answer) + 1}}}")
        assert grade(wrong, p.answer, "r1_distill_qwen").score == 0.0
    assert user_message(make_problem(random.Random(0), 2)).endswith("within \\boxed{}.")


def test_model_config_key_changes_with_config():
    assert TinyModelConfig().key() == TinyModelConfig().key()
    assert TinyModelConfig(hidden_size=128).key() != TinyModelConfig().key()


def test_random_model_chat_template(tiny_random_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_random_model)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 1 + 2?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    p = make_problems(1, seed=0)[0]
    ids = tok(p.solution(), add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == p.solution()
