"""Stop strings for verl's vLLM rollout server, as the authors' ``r1`` template runs stop at ``</answer>``.

verl 0.9.1 builds every request's sampling parameters from temperature, top-p, top-k and log-prob settings only
(``experimental/agent_loop/agent_loop.py:590-607``) and passes them to vLLM unchanged
(``workers/rollout/vllm_rollout/vllm_async_server.py:558,634``): no stop string can be configured. The authors' oat
actor sets ``stop=["</answer>"]`` with ``include_stop_str_in_output=True`` for training and evaluation samples
(``oat/main.py`` ``ZeroMathActor.init``). This extension reads the strings from verl's free-form rollout section
``actor_rollout_ref.rollout.custom.stop`` (``workers/config/rollout.py:234``) and adds them to every request the
server receives, training and validation alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

STOP_KEY = "stop"  # actor_rollout_ref.rollout.custom.<STOP_KEY>
SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
_PATCHED = "_precision_rl_stop_strings"


def stop_strings(custom: Mapping | None) -> list[str]:
    """Return the stop strings configured in the rollout's ``custom`` section (empty when none)."""
    if not custom:
        return []
    stop = custom.get(STOP_KEY) or []
    if isinstance(stop, str):
        stop = [stop]
    return [str(s) for s in stop]


def with_stop_strings(sampling_params: dict[str, Any], stop: list[str]) -> dict[str, Any]:
    """Return ``sampling_params`` with ``stop`` added (kept in the output text, as oat does); unchanged if none."""
    if not stop:
        return sampling_params
    merged = list(dict.fromkeys([*(sampling_params.get("stop") or []), *stop]))
    return {**sampling_params, "stop": merged, "include_stop_str_in_output": True}


def install_stop_strings(module) -> None:
    """Wrap ``vLLMHttpServer.generate`` in ``module`` so that each request carries the configured stop strings."""
    server = module.vLLMHttpServer
    original = server.generate
    if getattr(original, _PATCHED, False):
        return
    signature = inspect.signature(original)
    if "sampling_params" not in signature.parameters:
        raise RuntimeError(f"{SERVER_MODULE}.vLLMHttpServer.generate has no sampling_params argument any more: "
                           "the stop-string extension needs updating")

    @functools.wraps(original)
    async def generate(self, *args, **kwargs):
        stop = stop_strings(self.config.get("custom"))
        if stop:
            bound = signature.bind(self, *args, **kwargs)
            bound.arguments["sampling_params"] = with_stop_strings(dict(bound.arguments["sampling_params"]), stop)
            args, kwargs = bound.args[1:], bound.kwargs
        return await original(self, *args, **kwargs)

    setattr(generate, _PATCHED, True)
    server.generate = generate
