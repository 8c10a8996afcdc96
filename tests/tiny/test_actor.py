"""The training engine: teacher-forced log-probs line up with the response tokens; fp16 uses the scaler; LoRA
weights are merged in fp32 for the rollout engine."""

import math

import pytest
import torch

from precision_rl.precision import PrecisionArm
from precision_rl.tiny.actor import LoraSettings, TinyActor, make_batch


class _Optim:
    """The fields verl's build_optimizer reads."""

    optimizer, optimizer_impl, lr, weight_decay, betas, override_optimizer_config = (
        "AdamW", "torch.optim", 1e-3, 0.0, (0.9, 0.95), None)


def test_batch_alignment_matches_a_manual_forward(tiny_random_model):
    actor = TinyActor(tiny_random_model, PrecisionArm("fp32", "fp32"), _Optim())
    prompts, responses = [[5, 6, 7], [8, 9]], [[10, 11], [12, 13, 14, 15]]
    batch = make_batch(prompts, responses, pad_id=0)
    logp, entropy = actor.compute_log_prob(batch, micro_batch=1)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        with torch.no_grad():
            logits = actor.model(input_ids=torch.tensor([p + r])).logits[0].float()
        ref = torch.log_softmax(logits, -1)[torch.arange(len(p) - 1, len(p) + len(r) - 1), torch.tensor(r)]
        assert torch.allclose(logp[row, : len(r)], ref, atol=1e-5)
        assert torch.all(logp[row, len(r):] == 0) and torch.all(entropy[row, : len(r)] > 0)
    assert batch.response_mask.sum().item() == 6


@pytest.mark.parametrize("train,scaled", [("fp16", True), ("bf16", False), ("fp32", False)])
def test_loss_scaling_only_in_fp16(tiny_random_model, train, scaled):
    actor = TinyActor(tiny_random_model, PrecisionArm(train, "bf16"), _Optim())
    assert (actor.scaler is not None) is scaled
    batch = make_batch([[5, 6]], [[7, 8, 9]], pad_id=0)
    before = [p.detach().clone() for p in actor.model.parameters()]
    for attempt in range(24):  # noqa: B007 - read after the loop
        logp, _ = actor.forward(batch)
        norm, skipped = actor.step([-logp.sum()])
        unchanged = all(torch.equal(a, b) for a, b in zip(before, actor.model.parameters(), strict=True))
        assert unchanged is skipped  # an overflow skips the update, a finite step applies it
        if not skipped:
            break
    assert norm > 0 and actor.skipped_steps == attempt
    if scaled:  # each overflow halves the scale (from torch's default 2**16)
        assert actor.loss_scale == 65536.0 / 2**attempt
    else:
        assert attempt == 0 and actor.loss_scale == 1.0


def test_lora_sync_merges_in_fp32(tiny_random_model):
    actor = TinyActor(tiny_random_model, PrecisionArm("bf16", "bf16"), _Optim(), lora=LoraSettings(4, 8.0))
    trainable = [n for n, p in actor.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    batch = make_batch([[5, 6]], [[7, 8, 9]], pad_id=0)
    for _ in range(2):
        logp, _ = actor.forward(batch)
        actor.step([-logp.sum()])
    merged = actor.state_dict_for_sync()
    assert "model.layers.0.self_attn.q_proj.weight" in merged and not any("lora" in k for k in merged)
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tiny_random_model, dtype=torch.float32)
    plain.load_state_dict(merged, strict=False)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, actor.model(input_ids=ids).logits, atol=1e-5)


class _Schedule(_Optim):
    lr_warmup_steps, lr_warmup_steps_ratio, lr_scheduler_type, min_lr_ratio = -1, 0.0, "constant", None


def _lrs(config, total_steps: int) -> list[float]:
    from precision_rl.tiny.actor import build_lr_scheduler

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=config.lr)
    scheduler = build_lr_scheduler(optimizer, config, total_steps)
    out = []
    for _ in range(total_steps):
        out.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return out


def test_lr_schedule_follows_verls_settings():
    assert _lrs(_Schedule(), 5) == [1e-3] * 5
    warm = type("Warm", (_Schedule,), {"lr_warmup_steps": 4})()
    assert _lrs(warm, 6) == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    by_ratio = type("Ratio", (_Schedule,), {"lr_warmup_steps_ratio": 0.5})()
    assert _lrs(by_ratio, 4) == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])
    cosine = type("Cos", (_Schedule,), {"lr_scheduler_type": "cosine", "min_lr_ratio": 0.1})()
    lrs = _lrs(cosine, 11)
    # verl's progress is step / total_steps: half-cosine from lr towards lr * min_lr_ratio
    assert lrs == pytest.approx([1e-3 * (0.55 + 0.45 * math.cos(math.pi * k / 11)) for k in range(11)])
    assert all(a > b for a, b in zip(lrs, lrs[1:]))
    with pytest.raises(ValueError, match="linear"):
        _lrs(type("Bad", (_Schedule,), {"lr_scheduler_type": "linear"})(), 2)
