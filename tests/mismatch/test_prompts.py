"""Prompt token ids: generated tiny prompts and verl-schema parquet rows, rendered with the chat template."""

import pandas as pd
import pytest
from transformers import AutoTokenizer

from precision_rl.errors import UserError
from precision_rl.mismatch.config import tiny_ops
from precision_rl.mismatch.prompts import prompt_token_ids, tiny_messages


@pytest.fixture(scope="module")
def tok(tiny_random_model):
    return AutoTokenizer.from_pretrained(tiny_random_model)


def test_tiny_prompts_end_with_the_generation_prompt(tok):
    ids = prompt_token_ids(tok, "tiny", 3, seed=0)
    assert len(ids) == 3 and len(set(map(tuple, ids))) == 3
    for prompt in ids:
        text = tok.decode(prompt)
        assert text.startswith("<|im_start|>user\nWhat is ") and text.endswith("<|im_start|>assistant\n<think>\n")
    assert prompt_token_ids(tok, "tiny", 3, seed=0) == ids


def test_parquet_prompts_follow_the_verl_row_schema(tok, tmp_path):
    path = tmp_path / "rows.parquet"
    pd.DataFrame({"prompt": [[{"role": "user", "content": "What is 2 + 3?"}],
                             [{"role": "user", "content": "What is 4 * 5?"}]]}).to_parquet(path)
    ids = prompt_token_ids(tok, str(path), 5, seed=0)
    assert len(ids) == 2 and "What is 4 * 5?" in tok.decode(ids[1])
    pd.DataFrame({"prompt": [[{"content": "no role"}]]}).to_parquet(path)
    with pytest.raises(UserError, match="row 0"):
        prompt_token_ids(tok, str(path), 1, seed=0)


def test_generated_prompts_follow_the_requested_range():
    questions = [chat[0]["content"].split("?")[0] for chat in tiny_messages(8, 0, (20, 24))]
    assert all(20 <= sum(q.count(op) for op in " + - * ".split()) <= 24 for q in questions)
    short = [chat[0]["content"].split("?")[0] for chat in tiny_messages(8, 0, tiny_ops("tiny"))]
    assert all(2 <= sum(q.count(op) for op in " + - * ".split()) <= 3 for q in short)
