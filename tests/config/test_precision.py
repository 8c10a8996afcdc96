"""The precision knob: names, arms, and the verl keys each backend needs."""

import pytest
import torch

from precision_rl.config.precision import PrecisionArm, parse_arm, verl_precision_overrides
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
