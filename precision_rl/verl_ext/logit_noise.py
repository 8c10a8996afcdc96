"""The synthetic mismatch in verl's two engines: the rollout engine samples from logits plus seeded noise, and, in the
control, the trainer's logits carry the same noise (``precision_rl.logit_noise``).

**Rollout.** ``vllm_logit_noise.RolloutLogitNoise`` is a vLLM v1 logits processor (``vllm.v1.sample.logits_processor.interface``),
which verl 0.9.1 hands to the engine through ``actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors``. vLLM's
sampler applies it to the fp32 logits before the temperature (``vllm.v1.sample.sampler.Sampler.forward``), and verl's
default ``logprobs_mode: processed_logprobs`` returns the log-probabilities of the processed logits, so the rollout's
log μ are those of the perturbed distribution, as a real engine's would be. The noise of a request's next token is a
function of its prompt and response tokens so far, which vLLM passes to the processor as live lists.

**Trainer.** Under the control the engine adds the same noise to the model's logits before verl divides them by the
temperature and takes the log-softmax (``FSDPEngineWithLMHead.prepare_model_outputs``), on the packed or padded
layout verl computes in; the sum is kept in fp32, as vLLM's sampler keeps it.
"""

from __future__ import annotations

import torch

from precision_rl.logit_noise import LogitNoise, noise, noise_from_env, packed_prefix_hashes, prefix_hash


class RequestContext:
    """One request's prefix hash, extended as vLLM appends its output tokens."""

    def __init__(self, prompt_ids: list[int] | None, output_ids: list[int]):
        self.hash = prefix_hash(prompt_ids or [])
        self.output_ids = output_ids  # vLLM's live list of the request's output tokens
        self.consumed = 0

    def current(self) -> int:
        """Return the hash of the prompt and every output token so far."""
        fresh = self.output_ids[self.consumed:]
        if fresh:
            self.hash = prefix_hash(fresh, self.hash)
            self.consumed += len(fresh)
        return self.hash


def add_noise_rows(logits: torch.Tensor, rows: list[int], hashes: list[int], spec: LogitNoise) -> torch.Tensor:
    """Return ``logits`` [batch, vocab] with the noise of the contexts ``hashes`` added in place to ``rows``."""
    values = noise(torch.tensor(hashes, dtype=torch.int64), logits.shape[1], spec.seed)
    index = torch.tensor(rows, dtype=torch.int64, device=logits.device)
    logits.index_add_(0, index, (spec.sigma * values).to(device=logits.device, dtype=logits.dtype))
    return logits


def trainer_noise() -> LogitNoise | None:
    """Return the noise the trainer adds to its logits (the control), or None."""
    spec = noise_from_env()
    return spec if spec is not None and spec.in_trainer else None


def add_trainer_noise(logits: torch.Tensor, input_ids: torch.Tensor, spec: LogitNoise, packed: bool) -> torch.Tensor:
    """Return ``logits`` plus the noise of every position's context, in fp32.

    ``input_ids`` is verl's jagged tensor of the micro-batch's sequences (prompt and response, no padding);
    ``packed``: ``logits`` is verl's remove-padding layout [1, tokens (+ padding at the end), vocab], else the padded
    one [sequences, longest, vocab]. Padding positions get no noise.
    """
    tokens, offsets = input_ids.values(), input_ids.offsets()
    values = spec.sigma * noise(packed_prefix_hashes(tokens, offsets), logits.shape[-1], spec.seed)
    extra = torch.zeros(logits.shape, dtype=torch.float32)
    if packed:
        extra[0, :values.shape[0]] = values
    else:
        lengths = offsets.diff()
        rows = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        columns = torch.arange(tokens.numel()) - torch.repeat_interleave(offsets[:-1], lengths)
        extra[rows, columns] = values
    return logits.float() + extra.to(logits.device)
