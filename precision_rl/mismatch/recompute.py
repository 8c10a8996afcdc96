"""The training engine (pi): the HF model teacher-forces prompt + response and recomputes each token's logprob.

Semantics match vLLM's: logits in the compute dtype, then an fp32 log_softmax (divided by the temperature first
when T != 1). Sequences go through in token-budget batches and the LM head runs on response positions only, in
chunks, so at most ``logit_elems`` full-vocab logits exist at a time.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from precision_rl.config.precision import TORCH_DTYPES
from precision_rl.mismatch.sampling import Sample


@dataclass
class Recompute:
    """pi for every sample of one inference pass, in one training dtype (NaN rows mark dropped sequences)."""

    train: str
    logp_train: list[np.ndarray]
    exact_kl: list[np.ndarray | None]
    dropped: dict[int, str]
    engine: dict
    seconds: float
    load_seconds: float = 0.0


def load_model(model: str, train: str, mode: str, device: str):
    """Return the HF causal LM for computing in ``train``: ``fsdp`` = fp32 master weights cast to the dtype for
    compute (FSDP ``param_dtype``), forward under autocast in it (as verl's FSDP engine does); ``pure`` =
    weights loaded in the dtype, no autocast. fp32 is the same in both modes."""
    from transformers import AutoModelForCausalLM

    dtype = TORCH_DTYPES[train]
    load_dtype = torch.float32 if mode == "fsdp" else dtype
    net = AutoModelForCausalLM.from_pretrained(model, dtype=load_dtype, attn_implementation="sdpa")
    return net.to(device=device, dtype=dtype).eval()


def _autocast(train: str, mode: str, device: str):
    dtype = TORCH_DTYPES[train]
    if mode != "fsdp" or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def check_sample(sample: Sample, vocab: int, max_len: int | None) -> str | None:
    """Return why ``sample`` cannot be teacher-forced (token id outside the vocabulary, too long), or None."""
    ids = sample.prompt_ids + sample.response_ids
    if not sample.prompt_ids:
        return "empty prompt"
    if any(t < 0 or t >= vocab for t in ids):
        return f"token id outside the model's vocabulary [0, {vocab})"
    if max_len is not None and len(ids) > max_len:
        return f"sequence of {len(ids)} tokens exceeds the model's {max_len} positions"
    if len(sample.logp_infer) != len(sample.response_ids):
        return "mu has a different length than the response"
    return None


def _batches(samples: list[Sample], batch_tokens: int) -> list[list[int]]:
    """Return index batches of similar-length samples whose padded size stays under ``batch_tokens``."""
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
    batches, current, longest = [], [], 0
    for i in order:
        length = len(samples[i].prompt_ids) + len(samples[i].response_ids)
        if current and max(longest, length) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    return batches + ([current] if current else [])


@torch.no_grad()
def recompute(model: str, train: str, samples: list[Sample], mode: str = "fsdp", device: str = "cpu",
              temperature: float = 1.0, batch_tokens: int = 8192, logit_elems: int = 1 << 24,
              net=None) -> Recompute:
    """Return pi (log-probabilities of the sampled tokens) for ``samples`` computed in ``train``, and the exact
    per-token KL(mu || pi) where a sample carries full-vocab mu. Samples that cannot be scored are dropped
    with a reason instead of crashing the run."""
    import transformers

    start = time.perf_counter()
    net = net if net is not None else load_model(model, train, mode, device)
    load_seconds = time.perf_counter() - start
    vocab = net.get_output_embeddings().weight.shape[0]
    max_len = getattr(net.config, "max_position_embeddings", None)
    logp: list[np.ndarray] = [np.full(len(s.response_ids), np.nan) for s in samples]
    kl: list[np.ndarray | None] = [None] * len(samples)
    dropped = {s.seq_id: why for s in samples if (why := check_sample(s, vocab, max_len))}
    todo = [s for s in samples if s.seq_id not in dropped and s.response_ids]
    index = {s.seq_id: k for k, s in enumerate(samples)}
    for s in samples:
        if s.seq_id not in dropped and not s.response_ids:
            logp[index[s.seq_id]] = np.zeros(0)
    pad = net.config.pad_token_id if net.config.pad_token_id is not None else 0
    body, head = net.get_decoder(), net.get_output_embeddings()
    batches = _batches(todo, batch_tokens)
    with tqdm(total=sum(len(s.response_ids) for s in todo), desc=f"recompute {train}", unit="tok",
              disable=None) as bar:
        for batch in batches:
            seqs = [todo[i] for i in batch]
            width = max(len(s.prompt_ids) + len(s.response_ids) for s in seqs)
            ids = torch.full((len(seqs), width), pad, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for row, s in enumerate(seqs):
                full = s.prompt_ids + s.response_ids
                ids[row, :len(full)] = torch.tensor(full)
                mask[row, :len(full)] = 1
            with _autocast(train, mode, device):
                hidden = body(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
                # Hidden states that predict each response token, all rows of the batch concatenated.
                rows = torch.cat([torch.full((len(s.response_ids),), r) for r, s in enumerate(seqs)])
                cols = torch.cat([torch.arange(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.response_ids))
                                  for s in seqs])
                h = hidden[rows.to(device), cols.to(device)]
                del hidden
                targets = torch.tensor([t for s in seqs for t in s.response_ids], device=device)
                want_kl = all(s.full_logp_infer is not None for s in seqs)
                mu_full = np.concatenate([s.full_logp_infer for s in seqs]) if want_kl else None
                got = np.empty(len(targets), dtype=np.float64)
                got_kl = np.empty(len(targets), dtype=np.float64) if want_kl else None
                step = max(1, logit_elems // vocab)
                for c0 in range(0, len(targets), step):
                    c1 = min(len(targets), c0 + step)
                    lp = torch.log_softmax(head(h[c0:c1]).float() / temperature, dim=-1)
                    got[c0:c1] = lp.gather(-1, targets[c0:c1, None])[:, 0].double().cpu().numpy()
                    if want_kl:
                        mu = torch.from_numpy(mu_full[c0:c1]).to(lp.device, torch.float64)
                        terms = torch.where(mu > -torch.inf, mu.exp() * (mu - lp.double()), torch.zeros_like(mu))
                        got_kl[c0:c1] = terms.sum(-1).cpu().numpy()
                    bar.update(c1 - c0)
            offset = 0
            for s in seqs:
                r = len(s.response_ids)
                logp[index[s.seq_id]] = got[offset:offset + r]
                kl[index[s.seq_id]] = got_kl[offset:offset + r] if want_kl else None
                offset += r
    engine = {"name": "transformers", "version": transformers.__version__, "dtype": train, "mode": mode,
              "torch": torch.__version__, "device": device}
    return Recompute(train, logp, kl, dropped, engine, time.perf_counter() - start, load_seconds)
