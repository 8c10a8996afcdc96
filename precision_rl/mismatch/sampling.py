"""The inference engine (mu): vLLM samples responses and returns each sampled token's logprob in its dtype."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from precision_rl.config.precision import VLLM_DTYPES
from precision_rl.errors import UserError
from precision_rl.paths import vllm_socket_dir


@dataclass
class Sample:
    """One sampled sequence: prompt and response token ids, mu per response token, optionally full-vocab mu."""

    seq_id: int
    prompt_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    logp_infer: np.ndarray
    full_logp_infer: np.ndarray | None = None  # (len(response), vocab) float32, only for exact KL


@dataclass
class SamplingResult:
    """All samples of one inference dtype, with the engine's identity and timing."""

    infer: str
    samples: list[Sample]
    engine: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n_tokens(self) -> int:
        """Return the number of sampled response tokens."""
        return sum(len(s.response_ids) for s in self.samples)


def _flat_to_arrays(flat, n_tokens: int, vocab: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (sampled-token logprobs, full-vocab logprobs or None) from vLLM's FlatLogprobs of one response."""
    sampled = np.empty(n_tokens, dtype=np.float64)
    full = np.full((n_tokens, vocab), -np.inf, dtype=np.float32) if vocab else None
    for t in range(n_tokens):
        start, end = flat.start_indices[t], flat.end_indices[t]
        sampled[t] = flat.logprobs[start]  # vLLM puts the sampled token first
        if full is not None:
            full[t, flat.token_ids[start + 1:end]] = flat.logprobs[start + 1:end]
    return sampled, full


def sample(model: str, infer: str, prompts: list[list[int]], n: int, max_tokens: int, temperature: float,
           seed: int, max_model_len: int, full_vocab: int | None = None, ignore_eos: bool = False,
           device: str = "cpu") -> SamplingResult:
    """Return ``n`` vLLM samples per prompt in dtype ``infer`` with mu per token (full vocab if ``full_vocab``).

    vLLM's logprobs are ``raw_logprobs`` (fp32 log_softmax of the dtype logits) at T=1 and
    ``processed_logprobs`` (after temperature) otherwise; the recompute matches either.
    """
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    # vLLM logs to stdout by default; the CLI's stdout carries only its result line (read by `make mismatch`).
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    with vllm_socket_dir():
        longest = max(len(p) for p in prompts) + max_tokens
        try:
            llm = LLM(model=model, dtype=VLLM_DTYPES[infer], seed=seed, enforce_eager=device == "cpu",
                      max_model_len=max(max_model_len, longest), max_logprobs=-1 if full_vocab else 0,
                      logprobs_mode="raw_logprobs" if temperature == 1.0 else "processed_logprobs")
        except (ValueError, OSError) as exc:  # bad model path, prompt + MAX_TOKENS beyond the model's context, ...
            why = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:400]
            raise UserError(f"vLLM cannot start {model} in {infer}: {why}") from None
        try:
            params = SamplingParams(n=n, temperature=temperature, top_p=1.0, max_tokens=max_tokens,
                                    ignore_eos=ignore_eos, logprobs=-1 if full_vocab else 0, flat_logprobs=True,
                                    detokenize=False)
            start = time.perf_counter()
            outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=True)
            seconds = time.perf_counter() - start
            engine_dtype = str(llm.llm_engine.model_config.dtype)
        finally:
            llm.llm_engine.engine_core.shutdown()
            del llm
    samples = []
    for prompt_id, out in enumerate(outputs):
        for completion in out.outputs:
            ids = [int(t) for t in completion.token_ids]
            sampled, full = _flat_to_arrays(completion.logprobs, len(ids), full_vocab)
            samples.append(Sample(len(samples), prompt_id, list(out.prompt_token_ids), ids, sampled, full))
    engine = {"name": "vllm", "version": vllm.__version__, "dtype": VLLM_DTYPES[infer], "model_config_dtype":
              engine_dtype, "enforce_eager": device == "cpu", "logprobs_mode": "raw_logprobs" if temperature == 1.0
              else "processed_logprobs"}
    return SamplingResult(infer, samples, engine, seconds)
