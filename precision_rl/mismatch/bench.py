"""Benchmark of the mismatch tool: generation vs recompute time and tokens/s per dtype (not a test).

Runs the tool with the CPU defaults (or the given model) into a fresh temporary runs root, prints one row per
pair and writes the numbers to ``results/bench/mismatch-<UTC time>.json``. Goal: recompute <= generation time.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile

from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.launch.runs import hardware, utc_stamp
from precision_rl.mismatch.config import MismatchConfig, default_model, parse_dtypes, parse_pairs
from precision_rl.mismatch.outputs import read_pair
from precision_rl.mismatch.run import run_mismatch
from precision_rl.paths import BENCH_DIR


def bench(cfg: MismatchConfig) -> list[dict]:
    """Return one row per written pair: tokens, generation and recompute seconds and tokens/s."""
    with tempfile.TemporaryDirectory(prefix="bench-mismatch-") as root:
        os.environ["PRECISION_RL_RUNS"] = root
        written = run_mismatch(cfg, argv=sys.argv)
        rows = []
        for name, path in written.items():
            s = read_pair(path)[2]
            t = s["timing"]
            rows.append({"pair": name, "tokens": s["n_tokens"], "generation_s": t["generation_s"],
                         "generation_tok_per_s": t["generation_tok_per_s"], "recompute_s": t["recompute_s"],
                         "recompute_load_s": t["recompute_load_s"], "recompute_tok_per_s": t["recompute_tok_per_s"],
                         "recompute_le_generation": t["recompute_s"] <= t["generation_s"],
                         "mean_abs_prob_diff": s["mean_abs_prob_diff"], "exact_kl": s["exact_kl"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print a table, write the JSON record; return 0."""
    p = argparse.ArgumentParser(prog="python -m precision_rl.mismatch.bench", description=__doc__)
    p.add_argument("--model")
    p.add_argument("--dtypes", default="bf16 fp16")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    args = p.parse_args(argv)
    dtypes = parse_dtypes(args.dtypes)
    cfg = MismatchConfig(model=args.model or default_model("cpu"), dtypes=dtypes, pairs=parse_pairs("self", dtypes),
                         n=args.n, num_prompts=args.num_prompts, max_tokens=args.max_tokens, ignore_eos=True,
                         reference=False, name="bench")
    rows = bench(cfg)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(render_table([list(r.values()) for r in rows], list(rows[0]), floatfmt=".4g"))
    print(f"peak RSS of the recompute process: {peak_mib:.0f} MiB")
    out = atomic_write_json(BENCH_DIR / f"mismatch-{utc_stamp()}.json", {
        "config": {"model": cfg.model, "dtypes": dtypes, "n": cfg.n, "num_prompts": cfg.num_prompts,
                   "max_tokens": cfg.max_tokens},
        "rows": rows, "peak_rss_mib": peak_mib, "hardware": hardware()})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
