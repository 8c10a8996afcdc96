"""fp16 linear layers with the numerics of a GPU fp16 GEMM, for CPUs without fp16 matrix kernels.

On such CPUs (avx512 without avx512_fp16/AMX-FP16) torch's fp16 GEMMs run 10-30x slower than bf16 ones. A GPU's
fp16 GEMM takes fp16 operands, accumulates in fp32 and rounds its output to fp16; the same result comes from an
fp32 GEMM on fp16-rounded operands followed by rounding to fp16, which runs at fp32 speed. Gradients are rounded
to fp16 as well (FSDP computes them in the param dtype before its fp32 reduce), so loss-scale overflow behaves as
it does on a GPU. Each gradient is returned in the dtype of its input (fp16 under FSDP's ``param_dtype=fp16``).
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

HALF = torch.float16


class _HalfLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x16, w16 = x.to(HALF), weight.to(HALF)
        with torch.autocast("cpu", enabled=False):
            y = F.linear(x16.float(), w16.float(), None if bias is None else bias.to(HALF).float())
        ctx.save_for_backward(x16, w16)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return y.to(HALF)

    @staticmethod
    def backward(ctx, grad_out):
        x16, w16 = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        g = grad_out.to(HALF).float()
        with torch.autocast("cpu", enabled=False):
            grad_x = (g @ w16.float()).to(HALF).to(x_dtype)
            flat_g, flat_x = g.reshape(-1, g.shape[-1]), x16.float().reshape(-1, x16.shape[-1])
            grad_w = (flat_g.t() @ flat_x).to(HALF).to(w_dtype)
            grad_b = flat_g.sum(0).to(HALF).to(b_dtype) if b_dtype is not None else None
        return grad_x, grad_w, grad_b


def _half_forward(self, x):
    return _HalfLinear.apply(x, self.weight, self.bias)


def use_half_linears(model: torch.nn.Module) -> int:
    """Switch every nn.Linear of ``model`` to the emulated fp16 GEMM; return how many were switched."""
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = types.MethodType(_half_forward, module)
            count += 1
    return count
