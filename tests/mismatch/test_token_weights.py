"""Where GRPO-Token-TIS's weights fall (`make token-weights`): the advantages and the split of the gradient mass on
hand-made batches, the decoding trace against the sampler's own sums, and bad input in one line."""

import json

import numpy as np
import pytest
import torch

from precision_rl.mismatch import synthetic_dose as D
from precision_rl.mismatch import token_weights as W
from precision_rl.tiny.shipped import SHIPPED_DIR


def test_advantages_are_the_reward_less_its_group_mean_and_divide_by_the_std_only_when_asked():
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    assert W.group_advantages(rewards, 4, by_std=False).tolist() == [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]
    scaled = W.group_advantages(rewards, 4, by_std=True)
    assert scaled[:4] == pytest.approx(np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6))
    assert scaled[4:].tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="groups of 3"):
        W.group_advantages(rewards, 3, by_std=False)


def test_rank_correlation_shares_ties_and_is_undefined_for_a_flat_sample():
    assert W.spearman(np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 400])) == pytest.approx(1.0)
    assert W.spearman(np.array([1.0, 2, 3, 4]), np.array([4.0, 3, 2, 1])) == pytest.approx(-1.0)
    tied = W.spearman(np.array([1.0, 1, 2, 3]), np.array([1.0, 2, 3, 4]))
    assert tied == pytest.approx(np.corrcoef([1.5, 1.5, 3, 4], [1, 2, 3, 4])[0, 1])
    assert np.isnan(W.spearman(np.array([1.0, 1, 1]), np.array([1.0, 2, 3])))


def step(rows, pi, mu, grad):
    return D.TokenStep(np.array(rows), np.log(np.array(pi)), np.log(np.array(mu)), np.array(grad))


def test_the_gradient_mass_is_split_by_weight_and_weighted_by_the_advantage():
    # two samples of one group (rewards 1 and 0: advantages +0.5 and -0.5), two tokens each
    trace = [step([0, 1], [0.01, 0.9], [0.5, 0.9], [1.4, 0.1]), step([0, 1], [0.9, 0.9], [0.3, 0.6], [0.1, 0.1])]
    advantages = W.group_advantages(np.array([1.0, 0.0]), 2, by_std=False)
    result = W.summarize(trace, advantages, 2.0, "x", 3.0, np.array([1.0, 0.0]))
    weights = np.array([0.02, 1.0, 2.0, 1.5])  # min(pi/mu, 2) in the order the trace holds them
    mass = 0.5 * np.array([1.4, 0.1, 0.1, 0.1])
    assert result.tokens == 4 and result.sequences == 2 and result.reward == 0.5
    assert result.mean_weight == pytest.approx(weights.mean())
    assert result.mass_kept == pytest.approx((weights * mass).sum() / mass.sum())
    by_label = {b.label: b for b in result.bins}
    assert by_label["[0, 0.1)"].token_share == 0.25
    assert by_label["[0, 0.1)"].mass_share == pytest.approx(1.4 / 1.7)
    assert by_label["[0, 0.1)"].kept_share == pytest.approx(0.02 * 1.4 / 1.7)
    assert by_label["= C = 2"].token_share == 0.25 and by_label["[1, 2)"].token_share == 0.5
    assert np.isnan(by_label["[0.1, 0.5)"].mean_pi) and np.isnan(by_label["[0.1, 0.5)"].positive_share)
    assert by_label["[0, 0.1)"].positive_share == 1.0, "the one token below 0.1 is the right answer's"
    assert by_label["[1, 2)"].positive_share == 0.0 and by_label["= C = 2"].positive_share == 1.0
    assert sum(b.mass_share for b in result.bins) == pytest.approx(1.0)
    assert sum(b.kept_share for b in result.bins) == pytest.approx(result.mass_kept)


def test_a_cap_below_a_bin_edge_drops_the_edges_above_it():
    trace = [step([0, 1], [0.05, 0.9], [0.9, 0.9], [1.0, 0.1])]
    result = W.summarize(trace, np.array([0.5, -0.5]), 0.8, "x", 3.0, np.array([1.0, 0.0]))
    assert [b.label for b in result.bins] == ["[0, 0.1)", "[0.1, 0.5)", "[0.5, 0.8)", "= C = 0.8"]
    assert sum(b.token_share for b in result.bins) == 1.0


def test_a_batch_without_advantage_has_no_gradient_to_split():
    trace = [step([0, 1], [0.5, 0.5], [0.5, 0.5], [0.7, 0.7])]
    with pytest.raises(W.UserError, match="advantage 0"):
        W.summarize(trace, np.zeros(2), 2.0, "x", 3.0, np.ones(2))


def test_the_trace_holds_the_sampled_tokens_log_ratios_and_logit_gradients():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(SHIPPED_DIR), dtype=torch.float32).eval()
    prompts = [[1, 2, 3], [4, 5]]
    trace: list[D.TokenStep] = []
    _, k1, _, lengths = D.sample_with_noise(model, prompts, 3.0, 42, 1.0, 8, 0, torch.Generator().manual_seed(0),
                                            trace)
    for row in range(2):
        mine = [(s.log_mu - s.log_pi)[s.rows == row] for s in trace]
        assert sum(len(m) for m in mine) == lengths[row]
        assert sum(float(m.sum()) for m in mine) == pytest.approx(k1[row])
    grads = np.concatenate([s.logit_grad_norm for s in trace])
    assert ((grads >= 0) & (grads <= np.sqrt(2))).all()


def test_the_study_follows_the_experiment_and_writes_a_record_it_never_overwrites(tmp_path, capsys, monkeypatch):
    from precision_rl.paths import DATA_ENV

    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    out = tmp_path / "weights.json"
    argv = ["--prompts", "2", "--out", str(out)]
    assert W.main(argv) == 0
    record = json.loads(out.read_text())
    result = record["result"]
    assert result["experiment"] == W.DEFAULT_EXPERIMENT and result["sigma"] == 3.0 and result["cap"] == 2.0
    assert result["sequences"] == 32, "two prompts x the experiment's 16 samples each"
    assert 0 < result["mean_weight"] <= 2 and 0 <= result["mass_kept"] <= 2
    assert record["command"][-len(argv):] == argv and "cpu" in json.dumps(record["hardware"]).lower()
    assert (tmp_path / "data").is_dir(), "the experiment's training set is built where the data root points"
    before = out.read_text()
    assert W.main(argv) == 2
    assert out.read_text() == before and "exists" in capsys.readouterr().err


@pytest.mark.parametrize("experiment, says", [
    ("ladder/synthetic_s3_grpo_token_tis_control", "no mismatch to weigh"),
    ("sanity/grpo", "no mismatch to weigh"),
    ("ladder/synthetic_s3", "runs grpo, whose weights are not per token"),
    ("ladder/synthetic_s3_pg_seq_mis", "runs pg_seq_mis, whose weights are not per token"),
    ("ladder/nonexistent", "nonexistent"),
])
def test_an_experiment_without_a_dose_or_token_weights_is_one_line(experiment, says, tmp_path, capsys):
    assert W.main(["--experiment", experiment, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("argv", [["--prompts", "0"], ["--seed", "-1"]])
def test_a_bad_batch_or_seed_is_one_line(argv, tmp_path, capsys):
    assert W.main([*argv, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--prompts must be >= 1 and --seed >= 0" in err[0]
    assert not (tmp_path / "x.json").exists()
