"""The precision knob: the one place where precision names become torch dtypes and verl/vLLM keys.

A run has a training dtype (the actor's compute dtype: FSDP ``mixed_precision.param_dtype`` over fp32 master
weights, or Megatron ``dtype``) and an inference dtype (the vLLM rollout ``dtype``). They agree unless an
experiment asks otherwise (the precision ablation). Keys and accepted strings are those of verl 0.9.1
(``verl/workers/engine/fsdp/transformer_impl.py``, ``verl/utils/torch_dtypes.py``, ``workers/config/rollout.py``);
tests/launch/test_overrides.py proves them against verl's own Hydra config and config dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from precision_rl.errors import UserError
from precision_rl.verl_ext.cpu.gemm import HALF_DTYPES

PRECISIONS = ("fp16", "bf16", "fp32")
MANTISSA_BITS = {"fp32": 23, "fp16": 10, "bf16": 7}  # explicit fraction bits: fewer bits, coarser rounding

TORCH_DTYPES = {**HALF_DTYPES, "fp32": torch.float32}
VLLM_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
# Megatron's McoreEngineConfig asserts dtype in {bfloat16, float16}: it has no fp32 training.
MEGATRON_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def check_precision(name: object, where: str = "precision") -> str:
    """Return ``name`` if it is a known precision name, else raise a UserError naming ``where``."""
    if name not in PRECISIONS:
        raise UserError(f"unknown {where} {name!r}: choose one of {', '.join(PRECISIONS)}")
    return str(name)


@dataclass(frozen=True)
class PrecisionArm:
    """One (train, infer) precision pair of an experiment."""

    train: str
    infer: str

    def __post_init__(self):
        check_precision(self.train, "training precision")
        check_precision(self.infer, "inference precision")

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
    def infer_dtype(self) -> torch.dtype:
        """Return the torch dtype the rollout engine runs in."""
        return TORCH_DTYPES[self.infer]

    @property
    def vllm_dtype(self) -> str:
        """Return the dtype string vLLM (and verl's ``rollout.dtype``) takes."""
        return VLLM_DTYPES[self.infer]

    @property
    def uses_loss_scaling(self) -> bool:
        """Return True when training runs in fp16, which always uses dynamic loss scaling."""
        return self.train == "fp16"


def parse_arm(text: str) -> PrecisionArm:
    """Return the arm named by ``text``: a precision (``fp16``) or an arm label (``train_bf16-infer_fp32``)."""
    if text in PRECISIONS:
        return PrecisionArm(text, text)
    parts = text.split("-")
    if len(parts) == 2 and parts[0].startswith("train_") and parts[1].startswith("infer_"):
        return PrecisionArm(parts[0][len("train_"):], parts[1][len("infer_"):])
    raise UserError(
        f"unknown precision {text!r}: use one of {', '.join(PRECISIONS)} or a pair like train_bf16-infer_fp32"
    )


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
