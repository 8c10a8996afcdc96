"""verl's LoRA weight sync collects the adapter with peft inside an FSDP1 summon (verl.utils.fsdp_utils.collect_lora_params); the pinned
peft (requirements/cpu.in) must return it, or vLLM receives an empty adapter and the run stalls."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from precision_rl.paths import REPO_ROOT

PROBE = """
    import sys, torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://{tmp}/pg", rank=0, world_size=1)
    import verl  # loads the project's plugin (CPU platform)
    from peft import LoraConfig, get_peft_model
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
    from transformers import AutoModelForCausalLM
    from verl.utils.fsdp_utils import collect_lora_params, get_fsdp_wrap_policy
    model = get_peft_model(AutoModelForCausalLM.from_pretrained("{model}", dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    wrapped = FSDP(model, auto_wrap_policy=get_fsdp_wrap_policy(module=model, config=None, is_lora=True),
                   device_id=torch.device("cpu"), sync_module_states=True,
                   mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
    params = collect_lora_params(wrapped, layered_summon=False, base_sync_done=True)
    print(len(params), sum("lora_B" in k for k in params))
"""


@pytest.mark.slow
def test_pinned_peft_gives_verl_the_adapter_under_fsdp(tiny_random_model, tmp_path):
    assert metadata.version("peft") == "0.20.0"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), VERL_PLATFORM="cpu",
               VERL_USE_EXTERNAL_MODULES="precision_rl.verl_ext.plugin")
    code = textwrap.dedent(PROBE).format(tmp=tmp_path, model=tiny_random_model)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    total, lora_b = map(int, result.stdout.split()[-2:])
    # 4 layers x 7 linear modules x (A, B); an empty dict is what peft 0.21 returns here
    assert total == 56 and lora_b == 28
