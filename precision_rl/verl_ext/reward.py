"""verl reward managers that tell the reward function whether a response hit the length cap.

verl 0.9.1's reward managers pass the decoded response but not why generation stopped, and its vLLM server folds
vLLM's "length" finish reason into "completed" (``workers/rollout/vllm_rollout/vllm_async_server.py:719-726``).
The authors' runs score a truncated response 0, so these managers (verl's ``naive`` and ``dapo`` managers plus
this one fact) set ``extra_info["truncated"]`` before verl calls the reward function: a response is truncated when
it is ``data.max_response_length`` tokens long and its last token is not an end-of-sequence token — the case in
which vLLM reports ``finish_reason="length"``. ``precision_rl/verl_reward.py`` then scores it 0.
"""

from __future__ import annotations

import functools

import numpy as np

TRUNCATED_KEY = "truncated"
# Registered names: the experiment's algorithm picks one (precision_rl.algorithms).
NAIVE_MANAGER = "precision_rl"
DAPO_MANAGER = "precision_rl_dapo"


def is_truncated(response_ids, valid_length: int, max_response_length: int, eos_token_ids: set[int]) -> bool:
    """Return True when a response of ``valid_length`` tokens stopped at the length cap without an EOS token."""
    if valid_length < max_response_length or valid_length == 0:
        return False
    return int(response_ids[valid_length - 1]) not in eos_token_ids


def _eos_ids(tokenizer) -> set[int]:
    ids = tokenizer.eos_token_id
    ids = set(ids) if isinstance(ids, (list, tuple, set)) else {ids}
    return {int(i) for i in ids if i is not None}


@functools.cache
def manager_classes() -> dict[str, type]:
    """Return the reward manager classes by registered name (built on first use: verl is imported lazily)."""
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    def mark_truncation(self, data) -> None:
        item = data[-1:]
        response_ids = item.batch["responses"][0]
        valid = int(item.batch["attention_mask"][0][-response_ids.shape[-1]:].sum())
        cap = int(self.config.data.max_response_length)
        truncated = is_truncated(response_ids, valid, cap, _eos_ids(self.tokenizer))
        extras = data.non_tensor_batch.get("extra_info")
        if extras is None:
            data.non_tensor_batch["extra_info"] = np.array([{} for _ in range(len(data))], dtype=object)
            extras = data.non_tensor_batch["extra_info"]
        extras[-1] = dict(extras[-1] or {}, **{TRUNCATED_KEY: truncated})

    class TruncationAwareRewardManager(NaiveRewardManager):
        """verl's naive reward manager; the reward function also learns whether the response was truncated."""

        async def run_single(self, data):
            mark_truncation(self, data)
            return await super().run_single(data)

    class TruncationAwareDAPORewardManager(DAPORewardManager):
        """verl's DAPO reward manager (overlong shaping); the reward function also learns about truncation."""

        async def run_single(self, data):
            mark_truncation(self, data)
            return await super().run_single(data)

    return {NAIVE_MANAGER: TruncationAwareRewardManager, DAPO_MANAGER: TruncationAwareDAPORewardManager}


def register_managers() -> None:
    """Register the truncation-aware managers in verl's reward manager registry (idempotent)."""
    from verl.experimental.reward_loop.reward_manager import registry

    for name, cls in manager_classes().items():
        if name not in registry.REWARD_MANAGER:
            registry.register(name)(cls)
