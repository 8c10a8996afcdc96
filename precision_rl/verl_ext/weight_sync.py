"""A weight-sync socket of its own for every Ray cluster, so that two runs on one host never exchange weights.

verl 0.9.1 hands the trainer's weights to its colocated vLLM worker over a ZMQ socket named
``/tmp/rl-colocate-zmq-<job id>-replica-<r>-rank-<k>.sock``: the sender builds the name in
``verl.workers.rollout.vllm_rollout.vllm_rollout.ServerAdapter.__init__`` (``self.zmq_handle``), the receiver in
``verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension._get_zmq_handle`` from ``VERL_RAY_JOB_ID``,
which ``verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer.__init__`` sets for the vLLM processes it
starts. A job id is unique within one Ray cluster only, and every run that starts its own cluster is job
``01000000``: runs side by side on one host (a grid, the tests' verl runs, two researchers' runs on a shared node)
share the name. At each sync the sender unlinks the name and binds it anew, so a sync that overlaps another run's
sync connects the receiver to the other run's sender: one run then waits forever for a receiver that never comes,
and the other run's vLLM may load weights that are not its own.

Here the job id in both names is followed by the Ray node's id (``NODE_ID_DIGITS`` hex digits; a node id is drawn
anew whenever a Ray node starts, so every cluster on a host has its own). Both ends run on the node they share the
socket on, so both read the same id. verl's prefill/decode-disaggregated replicas set ``VERL_RAY_JOB_ID`` through
their actors' runtime environment (``verl.workers.rollout.vllm_rollout.vllm_pd_replica``) and are left as they are.
"""

from __future__ import annotations

import functools
import os

SENDER_MODULE = "verl.workers.rollout.vllm_rollout.vllm_rollout"  # ServerAdapter; vLLMHttpServer: rollout.SERVER_MODULE
JOB_ID_ENV = "VERL_RAY_JOB_ID"  # read by the receiver (verl.workers.rollout.vllm_rollout.utils, verl 0.9.1)
NODE_ID_DIGITS = 12
WRAPPED_MARK = "_precision_rl_scoped"  # set on a wrapped __init__


def scoped_job_id(job_id: str, node_id: str) -> str:
    """Return the job id that names a weight-sync socket: ``<job id>-<first NODE_ID_DIGITS of the node id>``."""
    return f"{job_id}-{node_id[:NODE_ID_DIGITS]}"


def scoped_handle(handle: str, job_id: str, node_id: str) -> str:
    """Return verl's sender socket ``handle`` with its job id scoped to the node (``scoped_job_id``); raise
    RuntimeError when the handle does not name the job id the way verl 0.9.1 does."""
    marker = f"-{job_id}-replica-"
    if marker not in handle:
        raise RuntimeError(f"verl's weight-sync socket {handle!r} no longer names the Ray job id as '{marker}': "
                           f"the extension in {__name__} needs updating")
    return handle.replace(marker, f"-{scoped_job_id(job_id, node_id)}-replica-", 1)


def _ray_ids() -> tuple[str, str]:
    import ray

    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id()


def _run_after_init(cls, after) -> None:
    """Make ``cls.__init__`` call ``after(instance)`` once verl's own ``__init__`` has returned (idempotent)."""
    original = cls.__init__
    if getattr(original, WRAPPED_MARK, False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        after(self)

    setattr(__init__, WRAPPED_MARK, True)
    cls.__init__ = __init__


def _scope_adapter_handle(adapter) -> None:
    adapter.zmq_handle = scoped_handle(adapter.zmq_handle, *_ray_ids())


def _pass_scoped_job_id(server) -> None:
    job_id, node_id = _ray_ids()
    if os.environ.get(JOB_ID_ENV) != job_id:
        raise RuntimeError(f"verl's vLLM server no longer passes the Ray job id in {JOB_ID_ENV}: the extension in "
                           f"{__name__} needs updating")
    os.environ[JOB_ID_ENV] = scoped_job_id(job_id, node_id)


def scope_sender(module) -> None:
    """Wrap ``ServerAdapter.__init__`` in ``module`` (verl's vLLM rollout adapter, the sending end) so that its
    ``zmq_handle`` names the node-scoped job id."""
    _run_after_init(module.ServerAdapter, _scope_adapter_handle)


def scope_receiver(module) -> None:
    """Wrap ``vLLMHttpServer.__init__`` in ``module`` (verl's vLLM server actor, whose vLLM processes receive) so
    that the job id it passes them names the node too; the wrapped ``__init__`` raises RuntimeError when verl no
    longer passes it."""
    _run_after_init(module.vLLMHttpServer, _pass_scoped_job_id)
