"""Metric formulas of the mismatch tool on hand-made numbers."""

import math

import numpy as np
import pandas as pd
import pytest

from precision_rl.mismatch import metrics


def test_token_metrics_match_definitions():
    mu = np.log(np.array([0.5, 0.25, 0.1]))
    pi = np.log(np.array([0.4, 0.25, 0.2]))
    out = metrics.token_metrics(mu, pi)
    rho = np.exp(pi - mu)
    assert out["token_k1_kl"] == pytest.approx(np.mean(mu - pi))
    assert out["token_k3_kl"] == pytest.approx(np.mean(rho - 1 - np.log(rho)))
    k3 = rho - 1 - np.log(rho)
    assert out["token_k3_kl_median"] == pytest.approx(np.median(k3)) and 0 < out["token_k3_kl_median"] < k3.max()
    assert out["token_k3_kl_p99"] == pytest.approx(np.percentile(k3, 99)) and out["token_k3_kl_p99"] < k3.max()
    assert out["mean_abs_prob_diff"] == pytest.approx((0.1 + 0 + 0.1) / 3)
    assert out["max_abs_prob_diff"] == pytest.approx(0.1)
    assert out["max_prob_diff"] == pytest.approx(0.1)
    assert out["min_prob_diff"] == pytest.approx(-0.1)
    assert out["frac_equal"] == pytest.approx(1 / 3)


def test_token_metrics_of_nothing_are_none():
    assert all(v is None for v in metrics.token_metrics(np.zeros(0), np.zeros(0)).values())


def test_slope_is_nats_per_1k_tokens_and_needs_two_lengths():
    lengths = np.array([1000, 2000, 3000])
    slope, intercept = metrics.fit_slope(lengths, -0.5 * lengths / 1000 + 0.1)
    assert slope == pytest.approx(-0.5) and intercept == pytest.approx(0.1)
    assert metrics.fit_slope(np.array([5, 5]), np.array([0.1, 0.2])) == (None, None)


def test_sequence_table_sums_log_ratio_and_keeps_empty_responses():
    tokens = pd.DataFrame({"seq_id": [0, 0, 1], "position": [0, 1, 0], "token_id": [3, 4, 5],
                           "logp_infer": [-1.0, -2.0, -0.5], "logp_train": [-1.5, -2.0, -0.25]})
    seqs = metrics.sequence_table(tokens, {0: 0, 1: 0, 2: 1}, {0: 2, 1: 1, 2: 0})
    assert list(seqs["seq_id"]) == [0, 1, 2]
    assert list(seqs["log_ratio"]) == pytest.approx([-0.5, 0.25, 0.0])
    summary = metrics.summarize(tokens, seqs)
    assert summary["seq_kl"] == pytest.approx(-(-0.5 + 0.25) / 3)
    k3 = lambda log_rho: np.expm1(log_rho) - log_rho  # noqa: E731
    assert summary["seq_kl_k3"] == pytest.approx((k3(-0.5) + k3(0.0) + k3(0.25) + 0.0) / 3)  # the empty one adds 0
    assert summary["n_sequences"] == 3 and summary["n_tokens"] == 3
    assert summary["exact_kl"] is None


def test_ratios_skip_missing_and_non_positive():
    out = metrics.ratios({"mean_abs_prob_diff": 8e-4, "token_k1_kl": -1.0, "exact_kl": None},
                         {"mean_abs_prob_diff": 1e-4, "token_k1_kl": 1.0, "exact_kl": 1.0})
    assert out["mean_abs_prob_diff"] == pytest.approx(8.0)
    assert out["token_k1_kl"] is None and out["exact_kl"] is None
    assert not any(isinstance(v, float) and math.isnan(v) for v in out.values())
