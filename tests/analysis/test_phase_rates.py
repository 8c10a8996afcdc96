"""The per-phase FLOP rate of a tiny step: the matrix weights of the shipped model counted by hand, each phase's
passes, and the CPU's nominal fp32 peak from its flags and clock."""

import os

import pytest

from precision_rl.analysis import phase_rates as R
from precision_rl.tiny.shipped import SHIPPED_DIR


def test_the_shipped_models_matrix_weights_are_its_linear_layers_and_lm_head():
    per_layer = 256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 704  # q, o; k, v (2 KV heads of 64); gate, up, down
    assert R.matmul_weights(R.model_config(SHIPPED_DIR)) == 4 * per_layer + 256 * 345


def test_a_step_counts_two_flops_per_weight_and_token_forward_and_six_with_the_backward():
    rates = {r.phase: r for r in R.step_rates(1000, tokens=50, seconds={"gen": 1.0, "update_actor": 2.0},
                                              ppo_epochs=2)}
    assert rates["gen"].flops == 2 * 1000 * 50 and rates["gen"].rate == 1e5
    assert rates["update_actor"].flops == 6 * 1000 * 50 * 2 and "old_log_prob" not in rates


@pytest.mark.parametrize("vendor,flags,expected", [
    ("AuthenticAMD", "fma avx2 avx512f avx512_bf16", 32), ("AuthenticAMD", "fma avx2", 32),
    ("GenuineIntel", "fma avx2 avx512f amx_tile", 64), ("GenuineIntel", "sse2", 16)])
def test_the_peak_per_cycle_follows_the_fma_pipes(vendor, flags, expected):
    assert R.flop_per_cycle(vendor, set(flags.split())) == expected
    cpuinfo = f"vendor_id\t: {vendor}\ncpu MHz\t\t: 2500.000\nflags\t\t: {flags}\n"
    peak, how = R.cpu_peak(cpuinfo)
    assert peak == len(os.sched_getaffinity(0)) * 2.5e9 * expected and f"{expected} FLOP/cycle" in how
    assert R.cpu_peak("flags: fma\n") is None
