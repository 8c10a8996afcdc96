"""verl's CPU platform: the ``cpu`` entry of verl's platform registry (``verl/plugin/platform``).

verl 0.9.1 knows the platforms nvidia, npu and rocm and falls back to nvidia when none is found
(``verl.plugin.platform.platform_manager._detect_platform_name``). This platform is registered by
``precision_rl.verl_ext.plugin`` in
every verl process and chosen with ``VERL_PLATFORM=cpu``: tensors live on the CPU, collectives use gloo, Ray's
"GPU" resource is satisfied by the fake GPUs the launcher declares (``ray_kwargs.ray_init.num_gpus``), and there is
no CUDA IPC, so verl's weight sync takes its shared-memory path.
"""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any

import torch

from precision_rl.verl_ext.settings import PLATFORM_NAME


def _zero(*args, **kwargs) -> int:
    return 0


def _noop(*args, **kwargs) -> None:
    return None


def _mem_get_info(*args, **kwargs) -> tuple[int, int]:
    import psutil

    memory = psutil.virtual_memory()
    return memory.available, memory.total


def cpu_device_module() -> types.SimpleNamespace:
    """Return the stand-in for ``torch.cuda`` that verl calls through ``get_torch_device()`` on this platform.

    Device, stream and event calls go to ``torch.cpu``; cache and peak-memory calls are no-ops or zeros (the CPU
    allocator has neither); ``mem_get_info`` reports host memory; RNG state is the CPU generator's.
    """
    cpu = torch.cpu
    return types.SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, current_device=lambda: PLATFORM_NAME,
        set_device=_noop, synchronize=cpu.synchronize, current_stream=cpu.current_stream, stream=cpu.stream,
        Stream=cpu.Stream, Event=cpu.Event, empty_cache=_noop, ipc_collect=_noop,
        set_per_process_memory_fraction=_noop, mem_get_info=_mem_get_info, memory_allocated=_zero,
        memory_reserved=_zero, max_memory_allocated=_zero, max_memory_reserved=_zero,
        reset_peak_memory_stats=_noop, get_device_name=lambda *a: "cpu", manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed, get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state,
        amp=cpu.amp,
    )


def platform_class():
    """Return the verl ``PlatformBase`` subclass of the CPU platform (built on first use: verl is imported lazily)."""
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl platform whose device is the host CPU."""

        _module = cpu_device_module()

        @property
        def device_name(self) -> str:
            return PLATFORM_NAME

        @property
        def vendor_name(self) -> str:
            return "host"

        @property
        def device_module(self):
            return self._module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            # Never auto-detected: only VERL_PLATFORM=cpu selects it, so GPU machines keep verl's detection.
            return False

        def current_device(self):
            # verl moves tensors with ``.to(get_device_id())``: an int would mean a CUDA device.
            return PLATFORM_NAME

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index) -> None:
            return None

        def synchronize(self, device_index=None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_gpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def rollout_env_vars(self) -> dict[str, str]:
            return {key: os.environ[key] for key in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND")
                    if key in os.environ}

        def cudart(self):
            return None

    return PlatformCPU
