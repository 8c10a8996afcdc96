"""Block-scaled quantization to the formats of ``precision_rl.formats``, returned dequantized in fp32.

Each function returns the values a kernel of that format computes with: every element rounded to the format's grid
(round to nearest, ties to even, saturating at the largest finite value, the sign of zero kept) and multiplied back
by its block's scale. A GEMM on these fp32 values with fp32 accumulation is the format's GEMM.
"""

from __future__ import annotations

import torch

from precision_rl.formats import QuantizedFormat


class QuantizationError(ValueError):
    """A tensor the format's blocks cannot cover (a width the block does not divide, where the format needs it)."""


def round_to_elements(x: torch.Tensor, fmt: QuantizedFormat) -> torch.Tensor:
    """Return ``x`` (fp32) rounded to ``fmt``'s element grid, ties to even, saturating at ±``fmt.max_value``."""
    x = x.float()
    clamped = x.clamp(-fmt.max_value, fmt.max_value)
    if fmt.torch_dtype is not None:
        return clamped.to(fmt.torch_dtype).float()
    # The grid's spacing is 2^(e - mantissa_bits) for a value of exponent e (at least 0: below 1 the subnormals keep
    # the spacing of [1, 2)); torch.round rounds half to even, and an even multiple of the spacing is an even encoding.
    magnitude = clamped.abs()
    exponent = torch.floor(torch.log2(magnitude)).clamp(0, fmt.emax)
    spacing = torch.exp2(exponent - fmt.mantissa_bits)
    return torch.copysign(torch.round(magnitude / spacing) * spacing, x)


def _scales(amax: torch.Tensor, fmt: QuantizedFormat) -> torch.Tensor:
    """Return the scale of each block from its largest magnitude: amax / max_value, or for MX the power of two that
    puts amax's exponent at the element's largest exponent; 1 for an all-zero block."""
    if fmt.power_of_two_scales:
        scale = torch.exp2(torch.floor(torch.log2(amax)) - fmt.emax)
    else:
        scale = amax / fmt.max_value
    return torch.where(amax > 0, scale, torch.ones_like(scale))


def _check_width(width: int, block: int, fmt: QuantizedFormat, what: str) -> None:
    if width % block and not fmt.partial_blocks:
        raise QuantizationError(f"{what}: {fmt.name} needs an input width divisible by its block of {block}, "
                                f"got {width}")


def quantize_weight(weight: torch.Tensor, fmt: QuantizedFormat, what: str = "weight") -> torch.Tensor:
    """Return ``weight`` ([out, in]) quantized to ``fmt`` in blocks of ``fmt.weight_block`` (the last block of a
    dimension the block does not divide is shorter), dequantized to fp32. ``what`` names the tensor in errors."""
    rows, cols = weight.shape
    block_rows, block_cols = fmt.weight_block
    _check_width(cols, block_cols, fmt, what)
    pad_rows, pad_cols = -rows % block_rows, -cols % block_cols
    padded = torch.nn.functional.pad(weight.float(), (0, pad_cols, 0, pad_rows))
    blocks = padded.view((rows + pad_rows) // block_rows, block_rows, (cols + pad_cols) // block_cols, block_cols)
    scale = _scales(blocks.abs().amax(dim=(1, 3), keepdim=True), fmt)
    out = round_to_elements(blocks / scale, fmt) * scale
    return out.view(rows + pad_rows, cols + pad_cols)[:rows, :cols]


def quantize_activations(x: torch.Tensor, fmt: QuantizedFormat, what: str = "activation") -> torch.Tensor:
    """Return ``x`` ([..., in]) quantized to ``fmt`` per token in groups of ``fmt.activation_group`` along the last
    dimension (dynamic scales; the last group shorter where the group does not divide it), dequantized to fp32."""
    cols = x.shape[-1]
    group = fmt.activation_group
    _check_width(cols, group, fmt, what)
    pad = -cols % group
    padded = torch.nn.functional.pad(x.float(), (0, pad))
    groups = padded.view(*x.shape[:-1], (cols + pad) // group, group)
    scale = _scales(groups.abs().amax(dim=-1, keepdim=True), fmt)
    out = round_to_elements(groups / scale, fmt) * scale
    return out.view(*x.shape[:-1], cols + pad)[..., :cols]
