"""The tiny scale's training engine: an HF transformers model with fp32 master weights computing in the train
dtype (autocast, as FSDP mixed precision with verl's autocast does), and dynamic loss scaling in fp16.

verl's FSDP engine creates ``ShardedGradScaler(growth_interval=400)`` when param_dtype is fp16, unscales before
clipping (so the logged grad norm is the true one) and lets the scaler skip steps with inf/NaN gradients; this
engine does the same with ``torch.amp.GradScaler``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from precision_rl.precision import PrecisionArm

SCALER_GROWTH_INTERVAL = 400  # verl 0.9.1 FSDPEngine, from PR #4036


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter of the training engine (verl ``model.lora_rank/lora_alpha/target_modules``)."""

    rank: int
    alpha: float
    targets: str = "all-linear"


@dataclass
class TokenBatch:
    """Right-padded prompt+response sequences and the response-aligned views the losses work on."""

    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    response_index: torch.Tensor  # [B, R]: position in input_ids of each response token (0 where padded)
    response_mask: torch.Tensor  # [B, R] float
    responses: torch.Tensor  # [B, R] token ids (pad where masked)


def make_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> TokenBatch:
    """Return the TokenBatch of paired prompt and response token lists."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    rlen = max(1, max(len(r) for r in responses))
    n = len(prompts)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    index = torch.zeros((n, rlen), dtype=torch.long)
    mask = torch.zeros((n, rlen), dtype=torch.float32)
    resp = torch.full((n, rlen), pad_id, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        seq = p + r
        input_ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[i, : len(seq)] = 1
        if r:
            index[i, : len(r)] = torch.arange(len(p), len(p) + len(r))
            mask[i, : len(r)] = 1.0
            resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return TokenBatch(input_ids, attention, index, mask, resp)


def select(batch: TokenBatch, rows) -> TokenBatch:
    """Return the sub-batch of ``rows``."""
    return TokenBatch(*(t[rows] for t in (batch.input_ids, batch.attention_mask, batch.response_index,
                                          batch.response_mask, batch.responses)))


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optimizer_config, total_steps: int):
    """Return the LambdaLR verl's FSDP engine builds from ``optimizer_config`` (constant or cosine, with warmup).

    As there, the schedule advances once per training step, and ``lr_warmup_steps <= 0`` falls back to
    ``lr_warmup_steps_ratio`` of the total steps.
    """
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    get = lambda name, default: getattr(optimizer_config, name, default)  # noqa: E731
    warmup = get("lr_warmup_steps", -1)
    if warmup is None or warmup <= 0:
        warmup = int(get("lr_warmup_steps_ratio", 0.0) * total_steps)
    kind = get("lr_scheduler_type", "constant")
    if kind == "constant":
        return get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup)
    if kind == "cosine":
        return get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=warmup, num_training_steps=total_steps,
                                               min_lr_ratio=get("min_lr_ratio", None), num_cycles=get("num_cycles", 0.5),
                                               zero_indexed_step=get("zero_indexed_step", True))
    raise ValueError(f"lr_scheduler_type {kind!r} is not supported (verl knows constant and cosine)")


class TinyActor:
    """HF causal LM + optimizer + LR schedule + (fp16) loss scaler, computing in ``arm.train_dtype``."""

    def __init__(self, model_dir: Path, arm: PrecisionArm, optimizer_config, grad_clip: float = 1.0,
                 lora: LoraSettings | None = None, total_steps: int = 1):
        from transformers import AutoModelForCausalLM
        from verl.workers.config.optimizer import build_optimizer

        self.arm, self.lora = arm, lora
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
        if lora is not None:
            from peft import LoraConfig, get_peft_model

            self.model = get_peft_model(self.model, LoraConfig(r=lora.rank, lora_alpha=lora.alpha,
                                                               target_modules=lora.targets, lora_dropout=0.0))
        if arm.train == "fp16":
            from precision_rl.tiny.half_linear import use_half_linears

            use_half_linears(self.model)
        self.model.train()
        self.optimizer = build_optimizer([p for p in self.model.parameters() if p.requires_grad], optimizer_config)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, optimizer_config, total_steps)
        self.grad_clip = grad_clip
        self.scaler = (torch.amp.GradScaler("cpu", growth_interval=SCALER_GROWTH_INTERVAL)
                       if arm.uses_loss_scaling else None)
        self.skipped_steps = 0

    def autocast(self):
        """Return the context that makes the forward compute in the train dtype (none for fp32)."""
        if self.arm.train == "fp32":
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=self.arm.train_dtype)

    def forward(self, batch: TokenBatch, with_entropy: bool = False):
        """Return log π of each response token [B, R] (and its entropy) from logits in the train dtype."""
        with self.autocast():
            logits = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        # Logits at position t predict token t+1; vLLM's raw logprobs are an fp32 log_softmax of dtype logits.
        pred_index = (batch.response_index - 1).clamp(min=0)
        picked = torch.gather(logits, 1, pred_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])).float()
        logp_all = torch.log_softmax(picked, dim=-1)
        logp = torch.gather(logp_all, -1, batch.responses.unsqueeze(-1)).squeeze(-1) * batch.response_mask
        if not with_entropy:
            return logp, None
        entropy = -(logp_all.exp() * logp_all).sum(-1) * batch.response_mask
        return logp, entropy

    @torch.no_grad()
    def compute_log_prob(self, batch: TokenBatch, micro_batch: int):
        """Return (log π_old, entropy) for ``batch`` without gradients, in micro-batches."""
        parts = [self.forward(select(batch, slice(i, i + micro_batch)), with_entropy=True)
                 for i in range(0, batch.input_ids.shape[0], micro_batch)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def step(self, losses: list[torch.Tensor]) -> tuple[float, bool]:
        """Backpropagate the summed micro-batch ``losses`` (scaled in fp16), clip, step; return (grad norm, skipped)."""
        loss = sum(losses)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
        skipped = not math.isfinite(grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skips the update itself when gradients hold inf/NaN
            self.scaler.update()
        elif not skipped:
            self.optimizer.step()
        self.skipped_steps += int(skipped)
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, skipped

    @property
    def loss_scale(self) -> float:
        """Return the current loss scale (1.0 without a scaler)."""
        return float(self.scaler.get_scale()) if self.scaler is not None else 1.0

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Return the fp32 master weights by HF name (tied lm_head omitted), for the rollout engine.

        With LoRA the adapter is merged in fp32 for the copy (and unmerged after), so the engine receives
        W + BA·α/r rounded once into its dtype — never through bf16 first (verl_spec.md §1).
        """
        if self.lora is None:
            return {k: v.detach() for k, v in self.model.state_dict().items() if k != "lm_head.weight"}
        self.model.merge_adapter()
        try:
            out = {}
            for key, value in self.model.base_model.model.state_dict().items():
                if "lora_" in key or key == "lm_head.weight":
                    continue
                out[key.replace(".base_layer.", ".")] = value.detach().clone()
        finally:
            self.model.unmerge_adapter()
        return out
