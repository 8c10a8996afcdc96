"""The emulated fp16 GEMM gives a GPU fp16 GEMM's result (fp16 operands, fp32 accumulation, fp16 output) and
gradients in each input's dtype, as FSDP's fp16 parameters need."""

import torch

from precision_rl.verl_ext.half_linear import use_half_linears


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
