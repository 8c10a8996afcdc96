"""verl reward managers that tell the reward function whether a response hit the length cap.

verl 0.9.1's reward managers pass the decoded response but not why generation stopped, and its vLLM server folds
vLLM's "length" finish reason into "completed"
(``verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer.generate``).
The authors' runs score a truncated response 0, so these managers (verl's ``naive`` and ``dapo`` managers plus
this one fact) set ``extra_info["truncated"]`` before verl calls the reward function: a response is truncated when
it is ``data.max_response_length`` tokens long, its last token is not an end-of-sequence token and it does not
end in one of the rollout's stop strings (``precision_rl/verl_ext/rollout.py``) — the case in which vLLM reports
``finish_reason="length"``. ``precision_rl/verl_ext/score.py`` then scores it 0.
"""

from __future__ import annotations

import functools

import numpy as np
from omegaconf import OmegaConf

from precision_rl.verl_ext.rollout import stop_strings

TRUNCATED_KEY = "truncated"
# Registered names: the experiment's algorithm picks one (precision_rl.config.algorithms).
NAIVE_MANAGER = "precision_rl"
DAPO_MANAGER = "precision_rl_dapo"


# Tokens decoded from a capped response's end to look for a stop string: far more than any stop string spans.
STOP_TAIL_TOKENS = 32


def is_truncated(response_ids, valid_length: int, max_response_length: int, eos_token_ids: set[int],
                 stopped_by_string: bool = False) -> bool:
    """Return True when a response of ``valid_length`` tokens stopped at the length cap without an EOS token.

    ``stopped_by_string``: the response ends in a stop string, so vLLM stopped for it even at the cap.
    """
    if valid_length < max_response_length or valid_length == 0 or stopped_by_string:
        return False
    return int(response_ids[valid_length - 1]) not in eos_token_ids


def ends_in_stop_string(tokenizer, response_ids, valid_length: int, stop: list[str]) -> bool:
    """Return True when the response's last tokens contain one of ``stop``.

    vLLM ends a response at the first stop string, so a stop string in the last tokens is the response's end.
    """
    if not stop or valid_length == 0:
        return False
    tail = response_ids[max(0, valid_length - STOP_TAIL_TOKENS):valid_length]
    text = tokenizer.decode([int(t) for t in tail], skip_special_tokens=False)
    return any(s in text for s in stop)


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
        stop = stop_strings(OmegaConf.select(self.config, "actor_rollout_ref.rollout.custom"))
        stopped = valid >= cap and ends_in_stop_string(self.tokenizer, response_ids, valid, stop)
        truncated = is_truncated(response_ids, valid, cap, _eos_ids(self.tokenizer), stopped_by_string=stopped)
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
