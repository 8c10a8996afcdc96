"""The rollout half of the synthetic mismatch: a vLLM v1 logits processor (``precision_rl.verl_ext.logit_noise``
says how it is wired). It lives apart so that only the rollout engine imports vLLM for it."""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor.builtin import process_dict_updates
from vllm.v1.sample.logits_processor.interface import LogitsProcessor

from precision_rl.logit_noise import noise_from_env
from precision_rl.verl_ext.logit_noise import RequestContext, add_noise_rows


class RolloutLogitNoise(LogitsProcessor):
    """vLLM logits processor adding the noise the environment names (``precision_rl.logit_noise``) to every
    request's logits; it does nothing where the environment names none."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.spec = noise_from_env()
        self.requests: dict[int, RequestContext] = {}

    def is_argmax_invariant(self) -> bool:
        """Return False: the noise moves the argmax, so greedy requests take it too."""
        return False

    def update_state(self, batch_update) -> None:
        """Track the requests that joined, left or moved in vLLM's persistent batch."""
        if self.spec is None:
            return
        process_dict_updates(self.requests, batch_update,
                             lambda params, prompt_ids, output_ids: RequestContext(prompt_ids, output_ids))

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Return ``logits`` with each tracked request's noise added (in place)."""
        if self.spec is None or not self.requests:
            return logits
        rows = sorted(self.requests)
        return add_noise_rows(logits, rows, [self.requests[row].current() for row in rows], self.spec)
