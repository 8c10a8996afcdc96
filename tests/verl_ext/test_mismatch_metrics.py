"""Signed max/min of π − μ over response tokens."""

import math

import torch

from precision_rl.metrics import PROBS_DIFF_MAX, PROBS_DIFF_MIN
from precision_rl.verl_ext.mismatch_metrics import signed_probs_diff


def test_signed_extremes_over_masked_tokens_only():
    pi = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.3, 0.3]]))
    mu = torch.log(torch.tensor([[0.4, 0.5, 0.1], [0.3, 0.1, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = signed_probs_diff(pi, mu, mask)
    assert math.isclose(out[PROBS_DIFF_MAX], 0.2, rel_tol=1e-5)  # 0.9 - 0.1 is masked out
    assert math.isclose(out[PROBS_DIFF_MIN], -0.3, rel_tol=1e-5)


def test_no_tokens_gives_nan():
    out = signed_probs_diff(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2))
    assert math.isnan(out[PROBS_DIFF_MAX]) and math.isnan(out[PROBS_DIFF_MIN])
