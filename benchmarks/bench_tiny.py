"""Benchmark of the tiny scale (`make bench-tiny`): the README's tiny-scale numbers come from here.

Runs `make sanity-fp16` and `make sanity-bf16` (verl's trainer on the CPU platform, default tiny profile) one after
the other, or with --existing summarizes the newest finished runs, and reports per arm: wall time, training reward
(first step, mean of the last 5), verl's per-step breakdown (timing_s/*), where the time beyond the steps goes
(Ray and driver start, training engine start, vLLM server start, first validation), peak memory of the run's
processes, and the bf16/fp16 mismatch ratios (mean |pi-mu|, token KL) beside the offline tool's when
`make mismatch` has been run. The machine's CPU and its fp16/bf16 matrix features are recorded with the numbers;
compare ratios measured in one run, never absolute times across machines.
Writes results/bench/tiny-<UTC>.json and prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from precision_rl import metrics as M
from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.launch import runs
from precision_rl.metrics import PROBS_DIFF_ABS_MEAN, REWARD, TOKEN_KL_K1, TOKEN_KL_K3
from precision_rl.paths import BENCH_DIR, REPO_ROOT, mismatch_root, runs_root

EXPERIMENT = "sanity/grpo"
ARMS = ("fp16", "bf16")
STEP_PARTS = ("gen", "old_log_prob", "adv", "update_actor", "update_weights", "step")
# verl's log lines carry "(<Actor> pid=N)" prefixes and "INFO:<date> <time>,<ms>:" stamps.
_STAMPED = re.compile(r"\((?P<actor>\w+) pid=\d+\).*?INFO:(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+:")
PHASES = {"TaskRunnerV1": "Ray + driver up", "WorkerDict": "training engine worker up",
          "vLLMHttpServer": "vLLM server up"}


def run_arm(precision: str, seed: int) -> Path:
    """Run one arm with make (as a user would) and return its run directory."""
    subprocess.run(["make", "-s", f"sanity-{precision}", f"SEED={seed}"], cwd=REPO_ROOT, check=True,
                   env=dict(os.environ))
    return runs.latest_run_dir(runs_root(), "tiny", EXPERIMENT, precision, seed)


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()


def phases(run_dir: Path, started: float) -> dict[str, float]:
    """Return seconds from the attempt's start to the first log line of each phase of verl's start-up."""
    out: dict[str, float] = {}
    for line in (run_dir / runs.TRAIN_LOG).read_text(errors="replace").splitlines():
        match = _STAMPED.search(line)
        if match and match["actor"] in PHASES and PHASES[match["actor"]] not in out:
            stamp = datetime.strptime(match["ts"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
            out[PHASES[match["actor"]]] = round(stamp - started, 1)
    return out


def summarize(run_dir: Path) -> dict:
    """Return the reward, timing, memory and mismatch summary of one finished run."""
    manifest = runs.read_manifest(run_dir)
    attempt = manifest["attempts"][0]
    started, ended = _stamp(attempt["started"]), _stamp(attempt["ended"])
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x["data"] for x in lines if x["step"] > 0]
    get = lambda key: np.array([s[key] for s in steps if s.get(key) is not None], dtype=float)  # noqa: E731
    reward = get(REWARD)
    step_total = float(get(M.STEP_TIME).sum())
    testing = float(get(M.TIMING_PREFIX + "testing").sum())
    wall = ended - started
    return {
        "run_dir": str(run_dir), "steps": len(steps), "wall_s": wall,
        "reward_first": float(reward[0]), "reward_last5": float(reward[-5:].mean()),
        "first_step_reaching_0.95": next((i + 1 for i, r in enumerate(reward) if r >= 0.95), None),
        "step_seconds_mean": {p: float(get(M.TIMING_PREFIX + p).mean()) for p in STEP_PARTS},
        "steps_total_s": step_total, "validation_in_steps_s": testing,
        "outside_steps_s": wall - step_total - testing, "startup_phases_s": phases(run_dir, started),
        "peak_memory_gib": attempt.get("peak_memory_gib"),
        "mean_abs_prob_diff": float(get(PROBS_DIFF_ABS_MEAN).mean()), "k3_kl": float(get(TOKEN_KL_K3).mean()),
        "k1_kl": float(get(TOKEN_KL_K1).mean()), "fp16_gemm": manifest["platform"].get("fp16_gemm"),
        "loss_scale_final": float(get(M.LOSS_SCALE)[-1]),
        "skipped_steps": float(get(M.SKIPPED_STEPS)[-1]),
    }


def offline_ratios() -> dict | None:
    """Return the offline mismatch tool's bf16/fp16 ratios for the tiny model, when `make mismatch` has run."""
    found = sorted(mismatch_root().glob("*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(found):
        doc = json.loads(path.read_text())
        if doc.get("scale") == "tiny" and doc.get("ratios_bf16_over_fp16"):
            return {"summary": str(path), **doc["ratios_bf16_over_fp16"]}
    return None


def main() -> int:
    """Run (or summarize) both arms and print the summary; return 0."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--existing", action="store_true", help="summarize the newest finished runs instead")
    args = parser.parse_args()
    out = {"experiment": EXPERIMENT, "seed": args.seed, "machine": runs.hardware(), "measured": runs.utc_stamp()}
    for precision in ARMS:
        run_dir = (runs.latest_run_dir(runs_root(), "tiny", EXPERIMENT, precision, args.seed) if args.existing
                   else run_arm(precision, args.seed))
        if run_dir is None or runs.read_manifest(run_dir).get("status") != "finished":
            raise SystemExit(f"error: no finished tiny run of {EXPERIMENT} {precision} seed {args.seed}")
        out[precision] = summarize(run_dir)
    out["bf16_over_fp16"] = {k: out["bf16"][k] / out["fp16"][k] for k in ("mean_abs_prob_diff", "k3_kl")}
    out["offline_bf16_over_fp16"] = offline_ratios()
    dest = atomic_write_json(BENCH_DIR / f"tiny-{runs.utc_stamp()}.json", out)
    m = out["machine"]
    print(f"\nCPU: {m['cpu_model']} x{m['cpu_count']}, matrix features: {', '.join(m['matrix_flags']) or 'none'}")
    rows = []
    for p in ARMS:
        s, t = out[p], out[p]["step_seconds_mean"]
        rows.append([p, f"{s['wall_s'] / 60:.1f} min",
                     f"{s['reward_first']:.2f} -> **{s['reward_last5']:.3f}** ({s['first_step_reaching_0.95']})",
                     f"{t['step']:.1f} ({t['gen']:.1f} / {t['old_log_prob']:.1f} / {t['update_actor']:.1f} / "
                     f"{t['update_weights']:.2f})", f"{s['outside_steps_s']:.0f} s {s['startup_phases_s']}",
                     f"{s['peak_memory_gib']} GiB", f"{s['mean_abs_prob_diff']:.2e}", f"{s['k3_kl']:.2e}"])
    print()
    print(render_table(rows, ["arm", "wall", "reward step 1 -> last 5 (first >= 0.95)",
                              "s/step (gen / old_log_prob / update / sync)", "outside steps", "peak RAM",
                              "mean abs(pi-mu)", "k3 KL"], markdown=True, floatfmt=""))
    r = out["bf16_over_fp16"]
    print(f"\nbf16/fp16 mismatch over training: mean |pi-mu| {r['mean_abs_prob_diff']:.1f}x, k3 KL {r['k3_kl']:.1f}x")
    if out["offline_bf16_over_fp16"]:
        print(f"offline (make mismatch): {out['offline_bf16_over_fp16']}")
    print(f"written {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"(benchmark took {time.time() - started:.0f} s)", file=sys.stderr)
    raise SystemExit(code)
