"""The block-scaled quantizers: elements on each format's grid (ties to even, saturation, the sign of zero), block
scales as each scheme sets them, blocks that do not divide a tensor, and widths a format refuses."""

import math

import pytest
import torch

from precision_rl.formats import QUANTIZED_FORMATS
from precision_rl.quantize import (
    QuantizationError,
    quantize_activations,
    quantize_weight,
    round_to_elements,
)

FP8 = [QUANTIZED_FORMATS["fp8_e4m3"], QUANTIZED_FORMATS["fp8_e5m2"]]
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # every magnitude E2M1 encodes (OCP MX v1.0), the reference
FP4 = QUANTIZED_FORMATS["fp4_e2m1"]


def _e2m1_reference(value: float) -> float:
    """Round one value to E2M1 by the definition: the nearest grid value, a tie to the even encoding, saturating."""
    magnitude = min(abs(value), 6.0)
    best = min(range(len(E2M1_GRID)), key=lambda i: (abs(E2M1_GRID[i] - magnitude), i % 2))
    return math.copysign(E2M1_GRID[best], value)


@pytest.mark.parametrize("fmt", FP8, ids=lambda f: f.name)
def test_fp8_elements_are_torchs_own_casts_and_saturate(fmt):
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 50
    inside = x.clamp(-fmt.max_value, fmt.max_value)
    assert torch.equal(round_to_elements(inside, fmt), inside.to(fmt.torch_dtype).float())
    big = torch.tensor([fmt.max_value * 4, -fmt.max_value * 4, float(fmt.max_value)])
    assert round_to_elements(big, fmt).tolist() == [fmt.max_value, -fmt.max_value, fmt.max_value]


def _across_decades(count: int, low: int, high: int, seed: int) -> torch.Tensor:
    """Return ``count`` signed values log-uniform over 10^low .. 10^high, plus ±0 and fp32 subnormals."""
    gen = torch.Generator().manual_seed(seed)
    magnitudes = 10 ** torch.empty(count).uniform_(low, high, generator=gen)
    signs = torch.randint(0, 2, (count,), generator=gen) * 2 - 1
    return torch.cat([magnitudes * signs, torch.tensor([0.0, -0.0, 1e-40, -1e-45])])


@pytest.mark.parametrize("fmt", FP8, ids=lambda f: f.name)
def test_fp8_elements_match_torchs_casts_from_fp32_subnormals_to_saturation(fmt):
    x = _across_decades(200_000, -12, 6, seed=2)
    inside = x.clamp(-fmt.max_value, fmt.max_value)
    out = round_to_elements(x, fmt)
    assert torch.equal(out, inside.to(fmt.torch_dtype).float())
    assert torch.equal(out.signbit(), x.signbit())


def test_fp4_elements_match_the_definition_across_decades():
    x = _across_decades(5_000, -3, 2, seed=3)
    assert round_to_elements(x, FP4).tolist() == [_e2m1_reference(v) for v in x.tolist()]


def test_fp4_elements_round_to_nearest_with_ties_to_even_and_saturate():
    grid = list(E2M1_GRID)
    points = grid + [(a + b) / 2 for a, b in zip(grid, grid[1:], strict=False)] + [0.1, 0.3, 0.74, 0.76, 2.6, 5.1, 7.0,
                                                                                  100.0]
    values = torch.tensor(points + [-p for p in points])
    expected = [_e2m1_reference(v) for v in values.tolist()]
    assert round_to_elements(values, FP4).tolist() == expected
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    assert round_to_elements(ties, FP4).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]


@pytest.mark.parametrize("fmt", [*FP8, FP4], ids=lambda f: f.name)
def test_the_sign_of_zero_is_kept(fmt):
    out = round_to_elements(torch.tensor([0.0, -0.0, -1e-30]), fmt)
    assert [math.copysign(1, v) for v in out.tolist()] == [1, -1, -1]


@pytest.mark.parametrize("fmt", FP8, ids=lambda f: f.name)
def test_fp8_weights_scale_each_128_block_to_the_format_s_largest_value(fmt):
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(300, 200, generator=gen)  # 128 divides neither dimension: the last blocks are shorter
    weight[128:256, 0:128] *= 1000  # one block far larger than the others
    out = quantize_weight(weight, fmt)
    for rows in (slice(0, 128), slice(128, 256), slice(256, 300)):
        for cols in (slice(0, 128), slice(128, 200)):
            block = weight[rows, cols]
            scale = block.abs().max() / fmt.max_value
            assert torch.equal(out[rows, cols], round_to_elements(block / scale, fmt) * scale)
    assert out.shape == weight.shape
    assert (out[128:256, 0:128].abs().max() - weight[128:256, 0:128].abs().max()).abs() < 1e-3  # the amax is exact


def test_fp4_weights_take_a_power_of_two_scale_per_32_inputs_of_each_row():
    gen = torch.Generator().manual_seed(2)
    weight = torch.randn(3, 64, generator=gen)
    weight[1, 32:] *= 37
    out = quantize_weight(weight, FP4)
    for row in range(3):
        for start in (0, 32):
            block = weight[row, start:start + 32]
            scale = 2.0 ** (math.floor(math.log2(float(block.abs().max()))) - 2)  # E2M1's largest exponent is 2
            assert torch.equal(out[row, start:start + 32], round_to_elements(block / scale, FP4) * scale)
    assert set((out[1, 32:] / (2.0 ** (math.floor(math.log2(float(weight[1, 32:].abs().max()))) - 2))).abs()
               .tolist()) <= set(E2M1_GRID)


@pytest.mark.parametrize("fmt", [*FP8, FP4], ids=lambda f: f.name)
def test_activations_are_scaled_per_token_and_group_and_a_zero_group_stays_zero(fmt):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 256, generator=gen)
    x[0, 1] *= 1e4  # a token with large values does not coarsen its neighbours
    x[1, 2, :fmt.activation_group] = 0
    out = quantize_activations(x, fmt)
    alone = quantize_activations(x[1:2, 3:4], fmt)
    assert torch.equal(out[1:2, 3:4], alone)
    assert torch.equal(out[1, 2, :fmt.activation_group], torch.zeros(fmt.activation_group))
    relative = ((out - x).abs() / x.abs().clamp_min(1e-6))[x.abs() > x.abs().amax(-1, keepdim=True) / 4]
    assert float(relative.max()) <= 2.0 ** -(fmt.mantissa_bits + 1) * 1.0001


def test_fp8_activations_allow_a_shorter_last_group_and_fp4_refuses_it():
    x = torch.randn(4, 704)  # the tiny model's down_proj input: five groups of 128 and one of 64
    out = quantize_activations(x, FP8[0])
    scale = x[:, 640:].abs().amax(-1, keepdim=True) / FP8[0].max_value
    assert torch.equal(out[:, 640:], round_to_elements(x[:, 640:] / scale, FP8[0]) * scale)
    with pytest.raises(QuantizationError, match="model.layers.0.mlp.down_proj: fp4_e2m1 needs an input width "
                                                "divisible by its block of 32, got 70"):
        quantize_activations(torch.randn(4, 70), FP4, "model.layers.0.mlp.down_proj")
    with pytest.raises(QuantizationError, match="got 70"):
        quantize_weight(torch.randn(8, 70), FP4)


@pytest.mark.parametrize("fmt", [*FP8, FP4], ids=lambda f: f.name)
def test_coarser_formats_move_a_gemm_further_from_the_exact_product(fmt):
    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(64, 256, generator=gen), torch.randn(128, 256, generator=gen) / 16
    exact = x @ w.t()
    error = ((quantize_activations(x, fmt) @ quantize_weight(w, fmt).t() - exact).norm() / exact.norm()).item()
    assert 2.0 ** -(fmt.mantissa_bits + 3) < error < 2.0 ** -(fmt.mantissa_bits - 1)
