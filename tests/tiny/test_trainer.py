"""One RL step per algorithm family at tiny scale, through the real vLLM engine and verl's loss code.

The untrained model solves nothing, so every reward would be 0 and every advantage 0; to exercise the update path
these tests score a response 1 when its length is even (a test-only reward, not the grader's rule).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from precision_rl.registry import load_experiment
from precision_rl.tiny.problems import make_problems, user_message
from precision_rl.tiny.rollout import VLLMRollout
from precision_rl.tiny.trainer import Prompts, TinyTrainer, verl_settings

pytestmark = pytest.mark.slow

SHRINK = ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=4",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "data.max_response_length=24"]
REQUIRED = ["critic/score/mean", "response_length/mean", "actor/grad_norm", "actor/entropy", "actor/pg_loss",
            "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean", "training/rollout_probs_diff_std",
            "rollout_corr/kl", "rollout_corr/k3_kl", "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor",
            "timing_s/sync", "timing_s/step", "mismatch/probs_diff_max", "mismatch/probs_diff_min",
            "precision/loss_scale", "precision/skipped_steps"]
CASES = [("sanity/grpo_token_tis", "bf16"), ("sanity/grpo_seq_mis", "bf16"), ("sanity/gspo", "bf16"),
         ("sanity/pg_seq_mis", "bf16"), ("dense14b/dapo", "bf16"), ("lora/grpo_token_tis", "bf16"),
         ("sanity/grpo", "fp16")]


@pytest.fixture(scope="module")
def engines(tiny_random_model):
    made: dict[str, VLLMRollout] = {}

    def get(dtype: str) -> VLLMRollout:
        if dtype not in made:
            made[dtype] = VLLMRollout(tiny_random_model, dtype, seed=0, max_model_len=160)
        return made[dtype]

    return get


@pytest.fixture(autouse=True)
def parity_reward(monkeypatch):
    from precision_rl.reward import grader

    def fake(responses, ground_truths, template, truncated=None):
        return [grader.GradeResult(float(len(r) % 2 == 0), len(r) % 2 == 0, None, True) for r in responses]

    monkeypatch.setattr(grader, "grade_batch", fake)


def _prompts(model_dir) -> Prompts:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    problems = make_problems(4, seed=5)
    ids = [tok(tok.apply_chat_template([{"role": "user", "content": user_message(p)}], tokenize=False,
                                       add_generation_prompt=True), add_special_tokens=False)["input_ids"]
           for p in problems]
    return Prompts(ids, [p.answer for p in problems], "tiny_sanity")


@pytest.mark.parametrize("name,precision", CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_one_step(tiny_random_model, engines, name, precision):
    spec = load_experiment(name, "tiny")
    arm = spec.arm(precision)
    settings, actor_cfg = verl_settings(spec, arm, seed=3, extra=SHRINK)
    trainer = TinyTrainer(settings, actor_cfg, arm, tiny_random_model, spec.template, 3, pad_id=0,
                          rollout=engines(arm.vllm_dtype))
    before = {k: v.clone() for k, v in trainer.actor.state_dict_for_sync().items()}
    metrics = trainer.step(_prompts(tiny_random_model), step=1)

    for key in REQUIRED:
        assert key in metrics and math.isfinite(metrics[key]), key
    assert metrics["training/rollout_probs_diff_mean"] > 0  # two engines, two roundings
    assert metrics["mismatch/probs_diff_min"] <= 0 <= metrics["mismatch/probs_diff_max"]
    after = trainer.actor.state_dict_for_sync()
    if spec.hyper.lr_warmup_steps:  # verl's warmup starts from lr 0 (DAPO's 10 steps)
        assert metrics["actor/lr"] == 0.0
    elif trainer.actor.skipped_steps == 0:
        assert metrics["actor/lr"] == pytest.approx(spec.hyper.lr)
        assert any(not torch.equal(before[k], after[k]) for k in after), "no parameter changed"
    if spec.lora is not None:
        frozen = [k for k in after if "embed_tokens" in k]
        assert all(torch.equal(before[k], after[k]) for k in frozen)

    assert (trainer.actor.scaler is not None) is (arm.train == "fp16")
    if spec.algorithm == "dapo":
        assert 0 < metrics["train/kept_fraction"] <= 1
    assert np.isclose(metrics["precision/skipped_steps"], trainer.actor.skipped_steps)


def _hf_logprobs(state: dict, model_dir, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.load_state_dict(state, strict=False)
    model = model.to(dtype)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sync_puts_the_trainers_weights_into_vllm(tiny_random_model, engines, dtype):
    """vLLM's CPU kernels repack bf16 weights, so the check is behavioural: after a large change to the trainer's
    weights and a sync, vLLM scores a sequence as the changed model (in the same dtype) does, not as the old one."""
    spec = load_experiment("sanity/grpo", "tiny")
    arm = spec.arm({"bfloat16": "bf16", "float16": "fp16"}[dtype])
    settings, actor_cfg = verl_settings(spec, arm, seed=3, extra=SHRINK)
    trainer = TinyTrainer(settings, actor_cfg, arm, tiny_random_model, spec.template, 3, pad_id=0,
                          rollout=engines(dtype))
    ids = _prompts(tiny_random_model).ids[0]
    old = trainer.actor.state_dict_for_sync()
    old = {k: v.clone() for k, v in old.items()}
    torch.manual_seed(0)
    with torch.no_grad():
        for p in trainer.actor.model.parameters():
            p.add_(0.5 * p.std() * torch.randn_like(p))
    trainer.sync()
    engine = torch.tensor(trainer.rollout.prompt_logprobs(ids))
    new_ref = _hf_logprobs(trainer.actor.state_dict_for_sync(), tiny_random_model, ids, arm.infer_dtype)
    old_ref = _hf_logprobs(old, tiny_random_model, ids, arm.infer_dtype)
    gap_new, gap_old = (engine - new_ref).abs().mean(), (engine - old_ref).abs().mean()
    assert gap_new < 0.05 and gap_old > 10 * gap_new, (gap_new, gap_old)
