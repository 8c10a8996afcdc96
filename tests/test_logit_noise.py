"""The synthetic mismatch's noise: a function of the context alone (the same in any batch, layout or process), standard
normal, different per seed, and its rollout and trainer halves adding exactly the same values."""

import math

import pytest
import torch
from vllm.v1.sample.logits_processor.interface import BatchUpdate, MoveDirectionality

from precision_rl import logit_noise as L
from precision_rl.verl_ext.logit_noise import RequestContext, add_noise_rows, add_trainer_noise, trainer_noise
from precision_rl.verl_ext.vllm_logit_noise import RolloutLogitNoise

VOCAB = 345  # the shipped tiny model's


def test_a_context_gets_the_same_noise_in_any_batch():
    hashes = torch.randint(0, L.PRIME, (300,))
    whole = L.noise(hashes, VOCAB, seed=42)
    assert torch.equal(L.noise(hashes[17:18], VOCAB, 42), whole[17:18])
    assert torch.equal(L.noise(hashes.flip(0), VOCAB, 42).flip(0), whole)
    assert not torch.equal(L.noise(hashes, VOCAB, 43), whole)


def test_the_noise_is_standard_normal_and_uncorrelated_across_tokens_and_contexts():
    values = L.noise(torch.arange(4000), VOCAB, seed=1)
    assert abs(float(values.mean())) < 0.01 and abs(float(values.std()) - 1) < 0.01
    assert float(values.abs().max()) < 4.4  # the table's tails end at the quantile of 1 - 2^-17
    columns = torch.corrcoef(values.T)
    columns.fill_diagonal_(0)
    assert float(columns.abs().max()) < 0.1
    rows = torch.corrcoef(values[:500])
    rows.fill_diagonal_(0)
    assert float(rows.abs().mean()) < 1.5 * math.sqrt(2 / math.pi / VOCAB)


def test_packed_prefix_hashes_hash_each_sequence_from_its_own_start():
    tokens = torch.tensor([5, 6, 7, 8, 9, 10, 11])
    offsets = torch.tensor([0, 3, 4, 7])
    expected = [L.prefix_hash([5]), L.prefix_hash([5, 6]), L.prefix_hash([5, 6, 7]), L.prefix_hash([8]),
                L.prefix_hash([9]), L.prefix_hash([9, 10]), L.prefix_hash([9, 10, 11])]
    assert L.packed_prefix_hashes(tokens, offsets).tolist() == expected
    assert L.prefix_hash([10, 11], L.prefix_hash([9])) == expected[-1]


def test_the_strength_and_seed_are_checked_and_travel_by_environment():
    with pytest.raises(ValueError, match="finite number >= 0, got -1"):
        L.LogitNoise(-1.0, 0)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        L.LogitNoise(1.0, -3)
    spec = L.LogitNoise(2.5, 7, in_trainer=True)
    assert L.noise_from_env(spec.env()) == spec
    assert L.noise_from_env({}) is None and L.noise_from_env({L.SIGMA_ENV: "0.0"}) is None


def test_a_request_context_follows_vllms_live_output_list():
    prompt, output = [3, 4, 5], []
    context = RequestContext(prompt, output)
    assert context.current() == L.prefix_hash(prompt)
    output += [9, 10]
    assert context.current() == L.prefix_hash(prompt + [9, 10])
    output.append(2)
    assert context.current() == L.prefix_hash(prompt + [9, 10, 2])


def _processor(monkeypatch, spec):
    for name, value in spec.env().items():
        monkeypatch.setenv(name, value)
    return RolloutLogitNoise(None, torch.device("cpu"), False)


def test_the_rollout_processor_adds_each_requests_noise_and_follows_the_batch(monkeypatch):
    spec = L.LogitNoise(1.5, 42)
    processor = _processor(monkeypatch, spec)
    assert not processor.is_argmax_invariant()
    outputs = {"a": [7], "b": [], "c": [1, 2]}
    prompts = {"a": [3, 4], "b": [5], "c": [6, 6, 6]}
    processor.update_state(BatchUpdate(3, removed=[], moved=[], added=[
        (0, None, prompts["a"], outputs["a"]), (1, None, prompts["b"], outputs["b"]),
        (2, None, prompts["c"], outputs["c"])]))
    processor.update_state(BatchUpdate(2, removed=[1], moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)], added=[]))
    logits = torch.zeros(2, VOCAB)
    processor.apply(logits)
    for row, name in enumerate(("a", "c")):
        expected = spec.sigma * L.noise(torch.tensor([L.prefix_hash(prompts[name] + outputs[name])]), VOCAB, 42)[0]
        assert torch.equal(logits[row], expected)


def test_without_noise_in_the_environment_the_processor_leaves_the_logits_alone(monkeypatch):
    monkeypatch.delenv(L.SIGMA_ENV, raising=False)
    processor = RolloutLogitNoise(None, torch.device("cpu"), False)
    processor.update_state(BatchUpdate(1, removed=[], moved=[], added=[(0, None, [1], [])]))
    logits = torch.randn(1, VOCAB)
    assert torch.equal(processor.apply(logits.clone()), logits)


@pytest.mark.parametrize("packed", [True, False], ids=["remove-padding", "padded"])
def test_the_trainer_adds_at_every_position_what_the_rollout_added_for_that_context(packed):
    spec = L.LogitNoise(3.0, 5, in_trainer=True)
    sequences = [[4, 8, 15, 16], [23, 42], [1, 2, 3, 4, 5]]
    input_ids = torch.nested.nested_tensor([torch.tensor(s) for s in sequences], layout=torch.jagged)
    total, longest = sum(map(len, sequences)), max(map(len, sequences))
    logits = torch.randn(1, total + 3, VOCAB).half() if packed else torch.randn(len(sequences), longest, VOCAB).half()
    noised = add_trainer_noise(logits, input_ids, spec, packed)
    assert noised.dtype == torch.float32
    position = 0
    for row, sequence in enumerate(sequences):
        for t in range(len(sequence)):
            at = (0, position) if packed else (row, t)
            rollout = add_noise_rows(logits[at].float()[None].clone(), [0], [L.prefix_hash(sequence[:t + 1])], spec)[0]
            assert torch.equal(noised[at], rollout)
            position += 1
    if packed:
        assert torch.equal(noised[0, total:], logits[0, total:].float())
    else:
        assert torch.equal(noised[1, 2:], logits[1, 2:].float())


def test_only_the_control_puts_the_noise_in_the_trainer(monkeypatch):
    for name, value in L.LogitNoise(1.0, 3).env().items():
        monkeypatch.setenv(name, value)
    assert trainer_noise() is None
    monkeypatch.setenv(L.IN_TRAINER_ENV, "1")
    assert trainer_noise() == L.LogitNoise(1.0, 3, in_trainer=True)


def test_vllm_loads_the_processor_by_the_name_the_launcher_renders():
    from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns

    from precision_rl.verl_ext.settings import LOGIT_NOISE_PROCESSOR

    assert _load_logitsprocs_by_fqcns([LOGIT_NOISE_PROCESSOR]) == [RolloutLogitNoise]
