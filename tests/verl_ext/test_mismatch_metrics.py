"""Signed max/min of π − μ and the median |log π − log μ| over response tokens, and the responses behind an extreme
one."""

import json
import math

import torch

from precision_rl.metrics import (
    ABS_LOG_RATIO_MEDIAN,
    EXTREMES_FILE,
    PROBS_DIFF_MAX,
    PROBS_DIFF_MIN,
    SEQUENCE_KL,
    SEQUENCE_KL_K3,
)
from precision_rl.verl_ext.mismatch_metrics import (
    abs_log_ratio_median,
    append_extremes,
    extreme_responses,
    sequence_kl,
    signed_probs_diff,
)


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
    assert math.isnan(abs_log_ratio_median(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2))[ABS_LOG_RATIO_MEDIAN])


def test_the_median_log_ratio_ignores_masked_tokens_and_one_outlier_cannot_move_it():
    mu = torch.zeros(2, 4)
    pi = torch.tensor([[0.001, -0.002, 0.003, 9.0], [-7.0, 0.004, 5.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 0]])  # |log ratio| kept: 0.001 0.002 0.003 9 0.004 5
    assert math.isclose(abs_log_ratio_median(pi, mu, mask)[ABS_LOG_RATIO_MEDIAN], 0.003, rel_tol=1e-6)
    pi[0, 3] = 90.0  # the k3 mean of these tokens grows by e^81; the median does not move
    assert math.isclose(abs_log_ratio_median(pi, mu, mask)[ABS_LOG_RATIO_MEDIAN], 0.003, rel_tol=1e-6)


def test_extreme_responses_are_the_ones_past_the_threshold_worst_first_with_their_unmasked_tokens():
    pi = torch.log(torch.tensor([[0.5, 0.9, 0.9], [0.3, 0.3, 0.3], [0.2, 0.9, 0.5]]))
    mu = torch.log(torch.tensor([[0.4, 0.3, 0.1], [0.3, 0.25, 0.3], [0.9, 0.9, 0.5]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1]])
    responses = torch.tensor([[11, 12, 0], [21, 22, 23], [31, 32, 33]])
    out = extreme_responses(pi, mu, mask, responses, threshold=0.1, limit=8)
    assert [r["row"] for r in out] == [2, 0]  # 0.7 at row 2, then 0.6 at row 0 (its masked 0.8 does not count)
    assert out[0]["position"] == 0 and math.isclose(out[0]["pi"], 0.2, rel_tol=1e-5)
    assert math.isclose(out[0]["mu"], 0.9, rel_tol=1e-5)
    assert out[1]["response_ids"] == [11, 12] and out[1]["position"] == 1
    assert out[1]["pi_per_token"] == [0.5, 0.9] and out[1]["mu_per_token"] == [0.4, 0.3]
    assert [r["row"] for r in extreme_responses(pi, mu, mask, responses, threshold=0.1, limit=1)] == [2]
    assert extreme_responses(pi, mu, mask, responses, threshold=0.75, limit=8) == []


def test_extremes_are_appended_as_one_json_line_each_with_step_prompt_and_dataset_row(tmp_path):
    pi = torch.log(torch.tensor([[0.9, 0.5]]))
    mu = torch.log(torch.tensor([[0.1, 0.5]]))
    records = extreme_responses(pi, mu, torch.ones(1, 2), torch.tensor([[5, 6]]), threshold=0.1, limit=8)
    path = tmp_path / EXTREMES_FILE
    assert append_extremes(path, 3, records, [[1, 2, 3]], [17]) == 1
    assert append_extremes(path, 4, records, [[1, 2, 3]], [17]) == 1
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [3, 4]
    assert lines[0]["prompt_ids"] == [1, 2, 3] and lines[0]["dataset_row"] == 17 and lines[0]["response_ids"] == [5, 6]


def test_the_sequence_kl_sums_each_response_s_log_ratio_and_averages_over_responses():
    mu = torch.log(torch.tensor([[0.5, 0.5, 0.9], [0.2, 0.9, 0.9], [0.3, 0.3, 0.3]]))
    pi = torch.log(torch.tensor([[0.25, 0.5, 0.1], [0.4, 0.3, 0.9], [0.3, 0.3, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])  # the padded token and the empty response do not count
    expected = (math.log(0.5 / 0.25) + math.log(0.2 / 0.4) + math.log(0.9 / 0.3)) / 2
    assert math.isclose(sequence_kl(pi, mu, mask)[SEQUENCE_KL], expected, rel_tol=1e-6)

    def k3(p, m):
        return p / m - 1 - math.log(p / m)
    by_k3 = (k3(0.25, 0.5) + k3(0.4, 0.2) + k3(0.3, 0.9)) / 2
    assert math.isclose(sequence_kl(pi, mu, mask)[SEQUENCE_KL_K3], by_k3, rel_tol=1e-5)
    assert all(math.isnan(v) for v in sequence_kl(pi, mu, torch.zeros_like(mask)).values())
