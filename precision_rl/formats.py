"""Number formats by name: the floating-point formats engines compute in and the block-scaled formats a rollout
engine may quantize its linear layers to. Every layer of the package reads format names and dtypes from here.

Floating-point formats (``fp32``, ``fp16``, ``bf16``) are torch dtypes. Quantized formats store each element in a few
bits with a shared scale per block; what a block is follows the scheme each format is used with in practice:

- ``fp8_e4m3`` and ``fp8_e5m2``: verl 0.9.1's FP8 rollout (``verl.workers.rollout.vllm_rollout.vllm_async_server``
  ``vLLMHttpServer._apply_quantization``: ``weight_block_size [128, 128]``, ``activation_scheme dynamic``), which
  vLLM runs as weights in 128 × 128 blocks and activations per token in groups of 128 along the input, each block
  with an fp32 scale (its largest magnitude over the format's largest value);
- ``fp4_e2m1``: the OCP Microscaling (MX) format MXFP4: blocks of 32 along the input for weights and activations
  alike, each with a power-of-two scale (E8M0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
FLOAT_DTYPES = {**HALF_DTYPES, "fp32": torch.float32}
FLOAT_FORMATS = ("fp16", "bf16", "fp32")
HALF_FORMATS = tuple(HALF_DTYPES)
HALF_FORMAT_OF_DTYPE = {dtype: name for name, dtype in HALF_DTYPES.items()}


@dataclass(frozen=True)
class QuantizedFormat:
    """A block-scaled element format: its element encoding, the blocks its scales cover, and how scales are kept."""

    name: str
    mantissa_bits: int  # explicit fraction bits of an element
    exponent_bits: int
    max_value: float  # the largest finite element magnitude; larger values saturate to it
    torch_dtype: torch.dtype | None  # torch's element dtype where torch can cast to it
    weight_block: tuple[int, int]  # (output rows, input columns) sharing one weight scale
    activation_group: int  # input columns of one token sharing one activation scale
    power_of_two_scales: bool  # MX: scales are powers of two (E8M0)
    partial_blocks: bool  # a layer whose input width the block does not divide is allowed (last block shorter)

    @property
    def emax(self) -> int:
        """Return the exponent of the largest element (MX scales put a block's largest value at this exponent)."""
        return math.floor(math.log2(self.max_value))


QUANTIZED_FORMATS = {
    "fp8_e4m3": QuantizedFormat("fp8_e4m3", 3, 4, 448.0, torch.float8_e4m3fn, (128, 128), 128, False, True),
    "fp8_e5m2": QuantizedFormat("fp8_e5m2", 2, 5, 57344.0, torch.float8_e5m2, (128, 128), 128, False, True),
    "fp4_e2m1": QuantizedFormat("fp4_e2m1", 1, 2, 6.0, None, (1, 32), 32, True, False),
}
MANTISSA_BITS = {"fp32": 23, "fp16": 10, "bf16": 7,
                 **{name: fmt.mantissa_bits for name, fmt in QUANTIZED_FORMATS.items()}}
