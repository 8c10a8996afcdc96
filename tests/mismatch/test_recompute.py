"""HF teacher-forced recompute and pair outputs on the untrained tiny model (no vLLM engine here)."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from precision_rl.errors import UserError
from precision_rl.mismatch import metrics, outputs
from precision_rl.mismatch.recompute import recompute
from precision_rl.mismatch.run import pair_result, retokenize_mismatches
from precision_rl.mismatch.sampling import Sample


@pytest.fixture(scope="module")
def tok(tiny_random_model):
    return AutoTokenizer.from_pretrained(tiny_random_model)


@pytest.fixture(scope="module")
def reference(tiny_random_model):
    """Independent fp32 scoring: one plain full forward per sequence, full-vocab logprobs."""
    net = AutoModelForCausalLM.from_pretrained(tiny_random_model, dtype=torch.float32).eval()

    def score(prompt, response):
        with torch.no_grad():
            logits = net(torch.tensor([prompt + response])).logits[0].float()
        lp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1).double()
        return lp.gather(-1, torch.tensor(response)[:, None])[:, 0].numpy(), lp.numpy()

    return score


def _samples(tok, reference, rng, count=5):
    out = []
    for k in range(count):
        prompt = tok.apply_chat_template([{"role": "user", "content": f"What is {k} + {k + 3}?"}],
                                         add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        response = [int(t) for t in rng.integers(0, len(tok), size=int(rng.integers(3, 40)))]
        logp, full = reference(prompt, response)
        out.append(Sample(k, k // 2, prompt, response, logp, full.astype(np.float32)))
    return out


def test_fp32_recompute_matches_independent_forward_and_batching(tiny_random_model, tok, reference):
    samples = _samples(tok, reference, np.random.default_rng(0))
    big = recompute(str(tiny_random_model), "fp32", samples, batch_tokens=10_000)
    small = recompute(str(tiny_random_model), "fp32", samples, batch_tokens=64, logit_elems=7 * 512)
    for s, a, b, kl in zip(samples, big.logp_train, small.logp_train, big.exact_kl, strict=True):
        assert np.max(np.abs(np.exp(a) - np.exp(s.logp_infer))) <= 1e-6
        assert np.max(np.abs(a - b)) <= 1e-5
        assert np.all(np.abs(kl) <= 1e-6)  # full-vocab KL of a distribution with itself
    assert not big.dropped


def test_low_precision_recompute_differs_and_exact_kl_is_positive(tiny_random_model, tok, reference):
    samples = _samples(tok, reference, np.random.default_rng(1))
    bf16 = recompute(str(tiny_random_model), "bf16", samples)
    pure = recompute(str(tiny_random_model), "bf16", samples, mode="pure")
    diff = np.concatenate([a - s.logp_infer for a, s in zip(bf16.logp_train, samples, strict=True)])
    assert np.mean(np.abs(diff)) > 0
    assert all(np.mean(k) > 0 for k in bf16.exact_kl)
    assert all(np.isfinite(a).all() for a in pure.logp_train)
    assert bf16.engine["mode"] == "fsdp" and pure.engine["mode"] == "pure"


def test_bad_sequences_are_dropped_or_kept_not_crashed_on(tiny_random_model, tok, reference):
    samples = _samples(tok, reference, np.random.default_rng(2), count=2)
    prompt = samples[0].prompt_ids
    text_ids = tok.encode("What is 12 + 7", add_special_tokens=False)
    char_ids = [t for ch in "What is 12 + 7" for t in tok.encode(ch, add_special_tokens=False)]
    assert char_ids != text_ids  # a valid but non-canonical tokenisation of the same text
    samples += [
        Sample(2, 1, prompt, [], np.zeros(0)),                                  # empty response
        Sample(3, 1, prompt, [1, len(tok) + 5, 2], np.full(3, -5.0)),           # id outside the vocabulary
        Sample(4, 2, prompt, char_ids, reference(prompt, char_ids)[0]),         # wrong (non-canonical) tokenisation
        Sample(5, 2, prompt, [1] * 600, np.full(600, -6.0)),                    # longer than the model's positions
    ]
    rec = recompute(str(tiny_random_model), "fp32", samples)
    assert set(rec.dropped) == {3, 5}
    assert "vocabulary" in rec.dropped[3] and "positions" in rec.dropped[5]
    assert rec.logp_train[2].size == 0
    assert np.max(np.abs(rec.logp_train[4] - samples[4].logp_infer)) <= 1e-5
    assert retokenize_mismatches(tok, [samples[4]]) == 1
    tokens, sequences, summary = pair_result(samples, rec, None)
    assert set(sequences["seq_id"]) == {0, 1, 2, 4}
    assert summary["n_dropped"] == 2 and summary["n_empty_responses"] == 1
    assert int(sequences.loc[sequences.seq_id == 2, "length"].iloc[0]) == 0


def test_pair_directory_round_trip_and_no_silent_overwrite(tiny_random_model, tok, reference, tmp_path, monkeypatch):
    monkeypatch.setenv("PRECISION_RL_RUNS", str(tmp_path))
    samples = _samples(tok, reference, np.random.default_rng(3))
    rec = recompute(str(tiny_random_model), "bf16", samples)
    ref = recompute(str(tiny_random_model), "fp32", samples)
    tokens, sequences, summary = pair_result(samples, rec, ref)
    out = outputs.model_root("tiny") / "bf16-bf16"
    assert out.parent == tmp_path / "mismatch" / "tiny"
    outputs.write_pair(out, tokens, sequences, summary, {"kind": "mismatch"}, overwrite=False)
    got_tokens, got_seqs, got_summary = outputs.read_pair(out)
    assert list(got_tokens.columns[:5]) == ["seq_id", "position", "token_id", "logp_infer", "logp_train"]
    assert list(got_seqs.columns) == ["seq_id", "prompt_id", "length", "log_ratio"]
    again = metrics.summarize(got_tokens, metrics.sequence_table(
        got_tokens, dict(zip(got_seqs.seq_id, got_seqs.prompt_id, strict=True)),
        dict(zip(got_seqs.seq_id, got_seqs.length, strict=True))))
    for key, value in again.items():
        assert got_summary[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key
    assert got_summary["reference"]["train_vs_ref"]["mean_abs_prob_diff"] > 0
    with pytest.raises(UserError, match="already exist"):
        outputs.write_pair(out, tokens, sequences, summary, {}, overwrite=False)
    outputs.write_pair(out, tokens.head(3), sequences, summary, {}, overwrite=True)
    assert len(outputs.read_pair(out)[0]) == 3
    assert [p.name for p in out.parent.iterdir()] == ["bf16-bf16"]  # no temp or old directories left
