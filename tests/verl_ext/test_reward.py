"""The truncation-aware reward managers: verl's own naive and DAPO managers, told which responses hit the cap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from precision_rl.verl_ext.reward import (
    DAPO_MANAGER,
    NAIVE_MANAGER,
    ends_in_stop_string,
    is_truncated,
    manager_classes,
    register_managers,
)
from precision_rl.verl_ext.rollout import STOP_KEY

EOS = 7


@pytest.mark.parametrize("ids,valid,cap,expected", [
    ([1, 2, 3, 0], 3, 4, False),    # stopped early
    ([1, 2, 3, 4], 4, 4, True),     # hit the cap mid-answer: vLLM's finish_reason "length"
    ([1, 2, 3, EOS], 4, 4, False),  # ended with EOS exactly at the cap: finish_reason "stop"
    ([], 0, 4, False),
])
def test_is_truncated(ids, valid, cap, expected):
    assert is_truncated(ids, valid, cap, {EOS}) is expected


def test_a_stop_string_at_the_cap_is_not_truncation():
    assert is_truncated([1, 2, 3, 4], 4, 4, {EOS}, stopped_by_string=True) is False


def test_ends_in_stop_string_reads_the_decoded_tail(tiny_random_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model)
    ids = tokenizer("<answer> 12 </answer>", add_special_tokens=False)["input_ids"]
    assert ends_in_stop_string(tokenizer, ids, len(ids), ["</answer>"])
    assert not ends_in_stop_string(tokenizer, ids, len(ids) - 1, ["</answer>"])
    assert not ends_in_stop_string(tokenizer, ids, len(ids), [])


def _batch(tokenizer, prompt: str, response: str, width: int):
    from verl import DataProto

    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"][:width]
    responses = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r))])
    attention = torch.tensor([[1] * len(p) + [1] * len(r) + [0] * (width - len(r))])
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor([p]), "responses": responses, "attention_mask": attention},
        non_tensors={"data_source": np.array(["tiny_sanity"], dtype=object),
                     "reward_model": np.array([{"ground_truth": "12"}], dtype=object),
                     "extra_info": np.array([{"index": 0}], dtype=object)})


@pytest.mark.parametrize("name", [NAIVE_MANAGER, DAPO_MANAGER])
def test_verls_manager_scores_a_truncated_answer_zero(tiny_random_model, name):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from precision_rl.verl_ext.score import compute_score

    register_managers()
    from verl.experimental.reward_loop.reward_manager.registry import get_reward_manager_cls

    assert get_reward_manager_cls(name) is manager_classes()[name]
    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model)
    answer = "3 + 9 = 12</think> The answer is \\boxed{12}."
    width = len(tokenizer(answer, add_special_tokens=False)["input_ids"])
    config = OmegaConf.create({"data": {"max_response_length": width}, "reward": {"reward_kwargs": {
        "overlong_buffer_cfg": {"enable": False, "len": 0, "penalty_factor": 1.0, "log": False},
        "max_resp_len": width}}})
    manager = get_reward_manager_cls(name)(config, tokenizer, compute_score)

    def score(data):
        return manager.loop.run_until_complete(manager.run_single(data))["reward_score"]

    # The whole answer fills the cap without an end-of-turn token: vLLM would report "length".
    assert score(_batch(tokenizer, "q", answer, width)) == 0.0
    # The same answer with room to spare scores 1.
    config.data.max_response_length = width + 4
    assert score(_batch(tokenizer, "q", answer, width + 4)) == 1.0

    # An answer that ends in the rollout's stop string exactly at the cap stopped for the string, not the cap.
    stopped = answer + "</answer>"
    width = len(tokenizer(stopped, add_special_tokens=False)["input_ids"])
    config.data.max_response_length = width
    assert score(_batch(tokenizer, "q", stopped, width)) == 0.0
    config.actor_rollout_ref = {"rollout": {"custom": {STOP_KEY: ["</answer>"]}}}
    assert score(_batch(tokenizer, "q", stopped, width)) == 1.0
