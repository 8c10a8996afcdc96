"""The batch statistics of the seed-spread study: verl's k3 and mean |π − μ|, the median |log ratio|, and their
spread over seeds."""

import math

import numpy as np
import pytest

from precision_rl.mismatch.batch_spread import batch_stats, main, spread


def test_batch_stats_match_their_definitions_and_the_median_ignores_one_outlier():
    log_mu = np.log(np.array([0.5, 0.5, 0.5, 0.5, 0.5]))
    log_pi = log_mu + np.array([0.0, 1e-3, -2e-3, 3e-3, 6.0])
    stats = batch_stats(7, log_pi, log_mu)
    ratio = log_pi - log_mu
    assert stats.seed == 7 and stats.tokens == 5
    assert math.isclose(stats.k3_token_kl, float(np.mean(np.exp(ratio) - 1 - ratio)), rel_tol=1e-12)
    assert math.isclose(stats.mean_abs_diff, float(np.mean(np.abs(np.exp(log_pi) - 0.5))), rel_tol=1e-12)
    assert math.isclose(stats.abs_log_ratio_median, 2e-3, rel_tol=1e-9) and stats.exact_zero_fraction == 0.2
    assert stats.k3_token_kl > 1000 * stats.abs_log_ratio_median  # the one token decides the mean, not the median
    even = batch_stats(0, np.array([1e-3, 4e-3, 0.0, 2e-3]), np.zeros(4))
    assert math.isclose(even.abs_log_ratio_median, 1e-3)  # the lower median, as torch.median takes it


def test_spread_reports_min_median_max_and_their_ratio():
    rows = [batch_stats(s, np.array([0.0, d]), np.zeros(2)) for s, d in enumerate((1e-4, 4e-4, 2e-4))]
    out = spread(rows)["abs_log_ratio_median"]
    assert out == {"min": 0.0, "median": 0.0, "max": 0.0, "max_over_min": float("inf")}
    k3 = spread(rows)["k3_token_kl"]
    assert k3["min"] < k3["median"] < k3["max"] and math.isclose(k3["max_over_min"], k3["max"] / k3["min"])


@pytest.mark.parametrize("argv", [["--seeds", "3"], ["--seeds", "1", "-2"], ["--temperature", "3"], ["--n", "0"]])
def test_bad_settings_are_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and "error:" in capsys.readouterr().err
