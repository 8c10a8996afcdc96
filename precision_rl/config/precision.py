"""The precision knob: the one place where precision names become verl/vLLM keys.

A run has a training dtype (the actor's compute dtype: FSDP ``mixed_precision.param_dtype`` over fp32 master
weights, or Megatron ``dtype``) and a rollout format. They agree unless an experiment asks otherwise (the precision
ablation, the mismatch ladder). The rollout format is a floating-point format (the vLLM rollout ``dtype``) or a
quantized one (``precision_rl.formats.QUANTIZED_FORMATS``): the rollout engine then runs in the training dtype with
its linear layers quantized, as vLLM runs ``quantization=fp8`` on a model loaded in fp16 or bf16. Keys and accepted
strings are those of verl 0.9.1 (``verl/workers/engine/fsdp/transformer_impl.py``, ``verl/utils/torch_dtypes.py``,
``workers/config/rollout.py``); tests/launch/test_overrides.py proves them against verl's Hydra config and config
dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from precision_rl.config.scale import PAPER
from precision_rl.errors import UserError
from precision_rl.formats import FLOAT_DTYPES, FLOAT_FORMATS, MANTISSA_BITS, QUANTIZED_FORMATS, QuantizedFormat
from precision_rl.verl_ext.settings import ROLLOUT_FORMAT_ENV

PRECISIONS = FLOAT_FORMATS  # what a training engine computes in
ROLLOUT_FORMATS = (*FLOAT_FORMATS, *QUANTIZED_FORMATS)  # what a rollout engine may compute in
TORCH_DTYPES = FLOAT_DTYPES
VLLM_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
# Megatron's McoreEngineConfig asserts dtype in {bfloat16, float16}: it has no fp32 training.
MEGATRON_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# The rollout formats verl 0.9.1 runs at paper scale, with the value of actor_rollout_ref.rollout.quantization
# (verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer._apply_quantization renders fp8 as e4m3 in
# 128 x 128 weight blocks).
VERL_QUANTIZATION = {"fp8_e4m3": "fp8"}


def check_precision(name: object, where: str = "precision", allowed: tuple[str, ...] = PRECISIONS) -> str:
    """Return ``name`` if it is one of ``allowed`` (the training precisions by default), else raise a UserError
    naming ``where`` and listing them."""
    if name not in allowed:
        raise UserError(f"unknown {where} {name!r}: choose one of {', '.join(allowed)}")
    return str(name)


@dataclass(frozen=True)
class PrecisionArm:
    """One (train, infer) precision pair of an experiment: the training dtype and the rollout format."""

    train: str
    infer: str

    def __post_init__(self):
        check_precision(self.train, "training precision")
        check_precision(self.infer, "inference precision", ROLLOUT_FORMATS)

    @property
    def label(self) -> str:
        """Return the arm's name in run names and paths: ``fp16`` or ``train_bf16-infer_fp32``."""
        return self.train if self.train == self.infer else f"train_{self.train}-infer_{self.infer}"

    @property
    def coarsest(self) -> str:
        """Return the arm's coarser precision (fewer mantissa bits): its rounding sets the train-infer mismatch."""
        return min((self.train, self.infer), key=MANTISSA_BITS.__getitem__)

    @property
    def train_dtype(self) -> torch.dtype:
        """Return the torch dtype the training engine computes in."""
        return TORCH_DTYPES[self.train]

    @property
    def rollout_quantization(self) -> QuantizedFormat | None:
        """Return the format the rollout engine quantizes its linear layers to, or None (a floating-point rollout)."""
        return QUANTIZED_FORMATS.get(self.infer)

    @property
    def rollout_dtype(self) -> str:
        """Return the floating-point format the rollout engine runs in: the rollout format, or for a quantized
        rollout the training dtype (its non-quantized layers and the GEMMs' outputs)."""
        return self.train if self.rollout_quantization else self.infer

    @property
    def infer_dtype(self) -> torch.dtype:
        """Return the torch dtype the rollout engine runs in."""
        return TORCH_DTYPES[self.rollout_dtype]

    @property
    def vllm_dtype(self) -> str:
        """Return the dtype string vLLM (and verl's ``rollout.dtype``) takes."""
        return VLLM_DTYPES[self.rollout_dtype]

    @property
    def uses_loss_scaling(self) -> bool:
        """Return True when training runs in fp16, which always uses dynamic loss scaling."""
        return self.train == "fp16"


def parse_arm(text: str) -> PrecisionArm:
    """Return the arm named by ``text``: a precision (``fp16``) or an arm label (``train_bf16-infer_fp32``,
    ``train_fp16-infer_fp8_e4m3``)."""
    if text in PRECISIONS:
        return PrecisionArm(text, text)
    parts = text.split("-")
    if len(parts) == 2 and parts[0].startswith("train_") and parts[1].startswith("infer_"):
        return PrecisionArm(parts[0][len("train_"):], parts[1][len("infer_"):])
    raise UserError(
        f"unknown precision {text!r}: use one of {', '.join(PRECISIONS)} or a pair like train_bf16-infer_fp32 "
        f"(rollout formats: {', '.join(ROLLOUT_FORMATS)})"
    )


def paper_scale_refusal(arm: PrecisionArm) -> str | None:
    """Return why the paper scale cannot run the rollout format of ``arm`` (one that verl 0.9.1 does not quantize
    to), or None when it can."""
    fmt = arm.rollout_quantization
    if fmt is None or fmt.name in VERL_QUANTIZATION:
        return None
    return (f"rollout format {fmt.name} runs at tiny scale only: verl 0.9.1 quantizes the rollout to "
            f"{', '.join(VERL_QUANTIZATION)} alone (actor_rollout_ref.rollout.quantization)")


def rollout_quantization_overrides(arm: PrecisionArm, scale: str) -> list[str]:
    """Return the overrides that quantize the rollout of ``arm`` at ``scale`` (none for a floating-point rollout).

    Paper scale: verl 0.9.1's own key, for the formats verl runs (``VERL_QUANTIZATION``); any other is a UserError.
    Tiny scale: the CPU platform's rollout GEMMs quantize (``verl_ext.cpu.gemm``), told by an environment variable
    that Ray hands to every worker and the vLLM engine inherits; verl's key stays unset, so its FP8 weight sync
    (``verl.utils.fp8_utils``), which needs CUDA kernels, is not taken.
    """
    fmt = arm.rollout_quantization
    if fmt is None:
        return []
    if scale == PAPER:
        if (refusal := paper_scale_refusal(arm)) is not None:
            raise UserError(refusal)
        return [f"actor_rollout_ref.rollout.quantization={VERL_QUANTIZATION[fmt.name]}"]
    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{ROLLOUT_FORMAT_ENV}={fmt.name}"]


def verl_precision_overrides(arm: PrecisionArm, backend: str) -> list[str]:
    """Return the verl 0.9.1 Hydra overrides that set training and inference precision for ``arm``.

    FSDP: ``mixed_precision`` is absent from verl's YAML, hence the ``+``; reduce and buffer stay fp32; the
    engine creates a ShardedGradScaler itself when param_dtype is fp16. fp32 training also needs SDPA attention
    (flash-attention rejects fp32) and no remove-padding (it relies on flash varlen). Megatron: ``dtype`` on
    actor and ref separately (the ref key does not follow the actor's).
    """
    rollout = [f"actor_rollout_ref.rollout.dtype={arm.vllm_dtype}"]
    if backend == "fsdp":
        out = []
        for role in ("actor", "ref"):
            prefix = f"+actor_rollout_ref.{role}.fsdp_config.mixed_precision"
            out += [f"{prefix}.param_dtype={arm.train}", f"{prefix}.reduce_dtype=fp32", f"{prefix}.buffer_dtype=fp32"]
        if arm.train == "fp32":
            out += [
                "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
                "actor_rollout_ref.model.use_remove_padding=false",
            ]
        return out + rollout
    if backend == "megatron":
        if arm.train not in MEGATRON_DTYPES:
            raise UserError(
                f"the megatron backend cannot train in {arm.train}: verl 0.9.1's McoreEngineConfig accepts only "
                "bf16 and fp16 (use backend fsdp for fp32 training)"
            )
        dtype = MEGATRON_DTYPES[arm.train]
        return [
            f"actor_rollout_ref.actor.megatron.dtype={dtype}",
            f"actor_rollout_ref.ref.megatron.dtype={dtype}",
        ] + rollout
    raise UserError(f"unknown backend {backend!r}: choose fsdp or megatron")
