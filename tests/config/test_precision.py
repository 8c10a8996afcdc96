"""The precision knob: names, arms, and the verl keys each backend needs."""

import pytest
import torch

from precision_rl.config.precision import (
    PrecisionArm,
    parse_arm,
    rollout_quantization_overrides,
    verl_precision_overrides,
)
from precision_rl.errors import UserError


def test_arm_labels_round_trip():
    for train in ("fp16", "bf16", "fp32"):
        for infer in ("fp16", "bf16", "fp32"):
            arm = PrecisionArm(train, infer)
            assert parse_arm(arm.label) == arm
    assert PrecisionArm("bf16", "fp32").label == "train_bf16-infer_fp32"
    assert PrecisionArm("fp16", "fp16").label == "fp16"


def test_dtypes_and_loss_scaling():
    arm = PrecisionArm("fp16", "bf16")
    assert (arm.train_dtype, arm.infer_dtype, arm.vllm_dtype) == (torch.float16, torch.bfloat16, "bfloat16")
    assert arm.uses_loss_scaling and not PrecisionArm("bf16", "fp16").uses_loss_scaling


@pytest.mark.parametrize("text", ["fp8", "float16", "train_fp16", "train_fp8-infer_fp16", ""])
def test_unknown_precisions_are_rejected(text):
    with pytest.raises(UserError):
        parse_arm(text)


def test_fsdp_fp16_keys():
    out = verl_precision_overrides(PrecisionArm("fp16", "fp16"), "fsdp")
    assert "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16" in out
    assert "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp16" in out
    assert "actor_rollout_ref.rollout.dtype=float16" in out
    assert not any("attn_implementation" in o for o in out)


def test_fsdp_fp32_training_needs_sdpa_and_padding():
    out = verl_precision_overrides(PrecisionArm("fp32", "bf16"), "fsdp")
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in out
    assert "actor_rollout_ref.model.use_remove_padding=false" in out


def test_megatron_has_no_fp32_training():
    assert "actor_rollout_ref.ref.megatron.dtype=float16" in verl_precision_overrides(PrecisionArm("fp16", "fp16"), "megatron")
    with pytest.raises(UserError, match="megatron backend cannot train in fp32"):
        verl_precision_overrides(PrecisionArm("fp32", "fp32"), "megatron")


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp4_e2m1"])
def test_a_quantized_rollout_runs_in_the_training_dtype(fmt):
    arm = parse_arm(f"train_fp16-infer_{fmt}")
    assert arm == PrecisionArm("fp16", fmt) and arm.label == f"train_fp16-infer_{fmt}"
    assert arm.rollout_quantization.name == fmt and arm.rollout_dtype == "fp16"
    assert (arm.infer_dtype, arm.vllm_dtype, arm.coarsest) == (torch.float16, "float16", fmt)
    assert PrecisionArm("bf16", fmt).vllm_dtype == "bfloat16" and PrecisionArm("fp16", "bf16").rollout_quantization is None
    assert "actor_rollout_ref.rollout.dtype=float16" in verl_precision_overrides(arm, "fsdp")


def test_a_quantized_format_never_trains():
    with pytest.raises(UserError, match="unknown training precision 'fp8_e4m3': choose one of fp16, bf16, fp32"):
        PrecisionArm("fp8_e4m3", "fp8_e4m3")
    with pytest.raises(UserError, match="unknown inference precision 'fp6'.*fp4_e2m1"):
        PrecisionArm("fp16", "fp6")


def test_the_rollout_quantization_keys_per_scale():
    fp8, e5m2 = PrecisionArm("bf16", "fp8_e4m3"), PrecisionArm("fp16", "fp8_e5m2")
    assert rollout_quantization_overrides(fp8, "paper") == ["actor_rollout_ref.rollout.quantization=fp8"]
    assert rollout_quantization_overrides(fp8, "tiny") == [
        "+ray_kwargs.ray_init.runtime_env.env_vars.PRECISION_RL_ROLLOUT_FORMAT=fp8_e4m3"]
    assert rollout_quantization_overrides(PrecisionArm("fp16", "bf16"), "paper") == []
    with pytest.raises(UserError, match="rollout format fp8_e5m2 runs at tiny scale only: verl 0.9.1 quantizes"):
        rollout_quantization_overrides(e5m2, "paper")
    assert rollout_quantization_overrides(e5m2, "tiny")
