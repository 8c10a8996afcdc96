"""The workarounds the CPU platform installs, each with the module whose first import applies it.

``precision_rl.verl_ext.plugin`` registers these post-import hooks only with ``VERL_PLATFORM=cpu``; the paper scale
runs without any of them. docs/architecture.md lists them from here (``analysis.scale_differences``).
"""

from __future__ import annotations

from collections.abc import Callable

from precision_rl.verl_ext.cpu import gemm, patches

CPU_HOOKS: tuple[tuple[Callable, str], ...] = (
    (patches.gloo_process_group, "verl.utils.distributed"),
    (patches.fsdp_sync_states_on_cpu, "torch.distributed.fsdp._init_utils"),
    (patches.fsdp_params_stay_on_cpu, "verl.utils.fsdp_utils"),
    (patches.vllm_inplace_weight_sync, "verl.workers.rollout.vllm_rollout.utils"),
    (patches.vllm_lora_rename_mapper, "vllm.model_executor.models.utils"),
    (gemm.vllm_invariant_gemms, "vllm.model_executor.layers.utils"),
    (patches.quiet_vllm_cpu_sleep, "vllm.v1.worker.cpu_worker"),
)
