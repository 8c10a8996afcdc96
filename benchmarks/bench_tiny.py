"""Benchmark of the tiny scale (`make bench-tiny`): the tiny instrument's time, memory, spread over seeds and rerun.

Runs `make sanity-fp16` and `make sanity-bf16` (verl's trainer on the CPU platform, default tiny profile) for each of
``--seeds`` (default 42), and with ``--rerun`` the first seed's FP16 run a second time; with ``--existing`` it
summarizes the newest finished runs instead. Per run it reports wall time, training reward (first step, trailing
mean of the last 5, first step whose trailing mean reaches 0.95), verl's per-step breakdown (timing_s/*), where the
time beyond the steps goes (Ray and driver start, training engine, vLLM server, validations), peak memory of the
run's processes, the mismatch (mean |pi-mu|, k3 KL) and each phase's achieved FLOP rate against this CPU's fp32 peak
(``precision_rl.analysis.phase_rates``). Over the runs: the final reward's mean, min and max per arm
(the seed spread), the BF16/FP16 wall-time ratio, and for a rerun how many metric values differ from the first run
(the rerun spread). The CPU's model and matrix-instruction flags and the GEMM modes are recorded with the numbers;
compare ratios measured in one benchmark, never absolute times across machines.
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
from precision_rl.analysis import phase_rates
from precision_rl.analysis.checks import SANITY_REWARD
from precision_rl.analysis.logs import attempts_seconds, stamp_seconds
from precision_rl.analysis.series import TRAIL_WINDOW
from precision_rl.config.registry import INSTRUMENT_EXPERIMENT as EXPERIMENT
from precision_rl.console import render_table
from precision_rl.fileio import atomic_write_json
from precision_rl.launch import runs
from precision_rl.launch.eta import cpu_label
from precision_rl.metrics import PROBS_DIFF_ABS_MEAN, REWARD, TOKEN_KL_K1, TOKEN_KL_K3
from precision_rl.paths import BENCH_DIR, runs_root

ARMS = ("fp16", "bf16")
STEP_PARTS = (*M.STEP_PHASES, "step")
# verl's log lines carry "(<Actor> pid=N)" prefixes and "INFO:<date> <time>,<ms>:" stamps.
_STAMPED = re.compile(r"\((?P<actor>\w+) pid=\d+\).*?INFO:(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+:")
PHASES = {"TaskRunnerV1": "Ray + driver up", "WorkerDict": "training engine worker up",
          "vLLMHttpServer": "vLLM server up"}


def run_arm(precision: str, seed: int) -> Path:
    """Run one arm with make (as a user would) and return its run directory."""
    subprocess.run(["make", "-s", f"sanity-{precision}", f"SEED={seed}"], check=True, env=dict(os.environ))
    return runs.latest_run_dir(runs_root(), "tiny", EXPERIMENT, precision, seed)


def phases(run_dir: Path, started: float) -> dict[str, float]:
    """Return seconds from the attempt's start to the first log line of each phase of verl's start-up."""
    out: dict[str, float] = {}
    log = run_dir / runs.TRAIN_LOG
    for line in (log.read_text(errors="replace").splitlines() if log.is_file() else []):
        match = _STAMPED.search(line)
        if match and match["actor"] in PHASES and PHASES[match["actor"]] not in out:
            stamp = datetime.strptime(match["ts"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
            out[PHASES[match["actor"]]] = round(stamp - started, 1)
    return out


def steps_of(run_dir: Path) -> dict[int, dict]:
    """Return each logged step's metrics of a run (every attempt merged)."""
    steps: dict[int, dict] = {}
    for path in runs.attempt_files(run_dir):
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            steps.setdefault(line["step"], {}).update(line["data"])
    return steps


def summarize(run_dir: Path) -> dict:
    """Return the reward, timing, memory and mismatch summary of one finished run: wall time summed over its
    attempts (a run resumed from checkpoints has several), peak memory the highest of theirs, start-up phases those
    of the first attempt."""
    manifest = runs.read_manifest(run_dir)
    attempts = manifest["attempts"]
    wall = attempts_seconds(attempts)
    peaks = [a["peak_memory_gib"] for a in attempts if a.get("peak_memory_gib") is not None]
    steps = [data for step, data in sorted(steps_of(run_dir).items()) if step > 0]
    get = lambda key: np.array([s[key] for s in steps if s.get(key) is not None], dtype=float)  # noqa: E731
    reward = get(REWARD)
    trailing = np.convolve(reward, np.ones(TRAIL_WINDOW) / TRAIL_WINDOW, mode="valid")
    step_total = float(get(M.STEP_TIME).sum())
    testing = float(get(M.TIMING_PREFIX + "testing").sum())
    return {
        "run_dir": str(run_dir), "seed": manifest["seed"], "steps": len(steps), "attempts": len(attempts),
        "wall_s": wall,
        "reward_first": float(reward[0]), "reward_final": float(trailing[-1]),
        "first_step_trailing_0.95": next((i + TRAIL_WINDOW for i, r in enumerate(trailing) if r >= SANITY_REWARD),
                                         None),
        "step_seconds_median": {p: float(np.median(get(M.TIMING_PREFIX + p))) for p in STEP_PARTS},
        "steps_total_s": step_total, "validation_in_steps_s": testing,
        "outside_steps_s": wall - step_total - testing,
        "startup_phases_s": phases(run_dir, stamp_seconds(attempts[0]["started"])),
        "peak_memory_gib": max(peaks) if peaks else None,
        "mean_abs_prob_diff": float(get(PROBS_DIFF_ABS_MEAN).mean()), "k3_kl": float(get(TOKEN_KL_K3).mean()),
        "k1_kl": float(get(TOKEN_KL_K1).mean()),
        "gemm": {k: manifest["platform"].get(k) for k in ("fp16_gemm", "bf16_gemm", "rollout_gemm")},
        "cpu": cpu_label(manifest.get("hardware") or {}),
        "loss_scale_final": float(get(M.LOSS_SCALE)[-1]), "skipped_steps": float(get(M.SKIPPED_STEPS)[-1]),
        "phase_rates": phase_rate_summary(manifest, steps),
    }


def phase_rate_summary(manifest: dict, steps: list[dict]) -> dict[str, dict]:
    """Return, per phase, the median over steps of its FLOPs, seconds and achieved rate, with its share of this CPU's
    fp32 peak where the run ran on this CPU kind (None elsewhere); empty where the run's model folder is not here."""
    model = Path(manifest.get("model_path") or "")
    if not (model / "config.json").is_file():
        return {}
    weights = phase_rates.matmul_weights(phase_rates.model_config(model))
    epochs = next((int(o.split("=", 1)[1]) for o in manifest.get("verl_overrides", [])
                   if o.startswith("actor_rollout_ref.actor.ppo_epochs=")), 1)
    peak = phase_rates.cpu_peak() if (manifest.get("hardware") or {}).get("cpu_id") == runs.hardware()["cpu_id"] \
        else None
    per_phase: dict[str, list] = {}
    for data in steps:
        seconds = {p: data[M.TIMING_PREFIX + p] for p in phase_rates.PASSES if data.get(M.TIMING_PREFIX + p)}
        for rate in phase_rates.step_rates(weights, data.get(M.TOTAL_TOKENS) or 0, seconds, epochs):
            per_phase.setdefault(rate.phase, []).append(rate)
    out = {}
    for phase, rates in per_phase.items():
        achieved = float(np.median([r.rate for r in rates]))
        out[phase] = {"gflop": float(np.median([r.flops for r in rates])) / 1e9,
                      "seconds": float(np.median([r.seconds for r in rates])), "gflop_per_s": achieved / 1e9,
                      "share_of_peak": achieved / peak[0] if peak else None, "peak": peak[1] if peak else None}
    return out


def rerun_spread(first: Path, second: Path) -> dict:
    """Return how two runs of one configuration differ: metric values compared (timings and memory aside), how many
    differ, and the largest difference of the final reward."""
    a, b = steps_of(first), steps_of(second)
    compared = differing = 0
    for step, data in a.items():
        for key, value in data.items():
            if key.startswith(M.MEASURED_PREFIXES):
                continue
            compared += 1
            differing += b.get(step, {}).get(key) != value
    return {"first": str(first), "rerun": str(second), "values_compared": compared, "values_differing": differing,
            "final_reward": [summarize(first)["reward_final"], summarize(second)["reward_final"]]}


def seed_spread(summaries: list[dict]) -> dict:
    """Return the final rewards of one arm's runs by seed, with their mean, min and max."""
    finals = {s["seed"]: s["reward_final"] for s in summaries}
    values = list(finals.values())
    return {"by_seed": finals, "mean": float(np.mean(values)), "min": min(values), "max": max(values),
            "every_seed_reaches_0.95": all(v >= 0.95 for v in values)}


def main() -> int:
    """Run (or summarize) the arms over the seeds, print the summary and write the record; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--rerun", action="store_true", help="run the first seed's FP16 run a second time")
    parser.add_argument("--existing", action="store_true", help="summarize the newest finished runs instead")
    args = parser.parse_args()
    out = {"experiment": EXPERIMENT, "seeds": args.seeds, "machine": runs.hardware(), "measured": runs.utc_stamp()}
    chosen: dict[str, list[Path]] = {arm: [] for arm in ARMS}
    for seed in args.seeds:
        for arm in ARMS:
            run_dir = (runs.latest_run_dir(runs_root(), "tiny", EXPERIMENT, arm, seed) if args.existing
                       else run_arm(arm, seed))
            if run_dir is None or runs.read_manifest(run_dir).get("status") != "finished":
                raise SystemExit(f"error: no finished tiny run of {EXPERIMENT} {arm} seed {seed}")
            chosen[arm].append(run_dir)
    out["runs"] = {arm: [summarize(d) for d in dirs] for arm, dirs in chosen.items()}
    out["seed_spread"] = {arm: seed_spread(summaries) for arm, summaries in out["runs"].items()}
    out["bf16_over_fp16_wall"] = float(np.median([s["wall_s"] for s in out["runs"]["bf16"]])
                                       / np.median([s["wall_s"] for s in out["runs"]["fp16"]]))
    out["bf16_over_fp16_mismatch"] = {k: float(np.mean([s[k] for s in out["runs"]["bf16"]])
                                               / np.mean([s[k] for s in out["runs"]["fp16"]]))
                                      for k in ("mean_abs_prob_diff", "k3_kl")}
    if args.rerun:
        first = chosen["fp16"][0]
        out["rerun_spread"] = rerun_spread(first, run_arm("fp16", args.seeds[0]))
    dest = atomic_write_json(BENCH_DIR / f"tiny-{runs.utc_stamp()}.json", out)
    m = out["machine"]
    where = "summarized on" if args.existing else "CPU"
    print(f"\n{where}: {cpu_label(m)} x{m['cpu_count']}; GEMMs: {out['runs']['fp16'][0]['gemm']}")
    if args.existing:
        print("each run's own CPU is in the last column (from its manifest); compare times only between runs on one")
    rows = []
    for arm in ARMS:
        for s in out["runs"][arm]:
            t = s["step_seconds_median"]
            rows.append([arm, s["seed"], f"{s['wall_s'] / 60:.1f} min",
                         f"{s['reward_first']:.2f} -> **{s['reward_final']:.3f}** ({s['first_step_trailing_0.95']})",
                         f"{t['step']:.1f} ({t['gen']:.1f} / {t['old_log_prob']:.1f} / {t['update_actor']:.1f} / "
                         f"{t['update_weights']:.2f})", f"{s['outside_steps_s']:.0f} s", f"{s['peak_memory_gib']} GiB",
                         f"{s['mean_abs_prob_diff']:.2e}", f"{s['k3_kl']:.2e}", s["cpu"]])
    print()
    print(render_table(rows, ["arm", "seed", "wall", "reward step 1 -> final trailing 5 (first step >= 0.95)",
                              "s/step median (gen / old_log_prob / update / sync)", "outside steps", "peak RAM",
                              "mean abs(pi-mu)", "k3 KL", "CPU [matrix flags]"], markdown=True, floatfmt=""))
    rate_rows = [[arm, s["seed"], phase, f"{r['gflop']:.0f}", f"{r['seconds']:.1f}", f"{r['gflop_per_s']:.1f}",
                  f"{100 * r['share_of_peak']:.0f} %" + (" (below half)" if r["share_of_peak"] < phase_rates.HALF_PEAK
                                                         else "") if r["share_of_peak"] is not None else "other CPU"]
                 for arm in ARMS for s in out["runs"][arm] for phase, r in s["phase_rates"].items()]
    peak = phase_rates.cpu_peak()
    print(f"\nper-phase matrix FLOP rate (median step); this CPU's fp32 peak: "
          f"{f'{peak[0] / 1e9:.0f} GFLOP/s ({peak[1]})' if peak else 'unknown'}")
    print(render_table(rate_rows, ["arm", "seed", "phase", "GFLOP", "s", "GFLOP/s", "of peak"], markdown=True,
                       floatfmt=""))
    for arm, spread in out["seed_spread"].items():
        print(f"{arm}: final reward {spread['mean']:.3f} [{spread['min']:.3f}-{spread['max']:.3f}] over seeds "
              f"{sorted(spread['by_seed'])}; every seed >= 0.95: {spread['every_seed_reaches_0.95']}")
    r = out["bf16_over_fp16_mismatch"]
    print(f"bf16/fp16: wall {out['bf16_over_fp16_wall']:.2f}x; mismatch over training: mean |pi-mu| "
          f"{r['mean_abs_prob_diff']:.1f}x, k3 KL {r['k3_kl']:.1f}x")
    if args.rerun:
        rr = out["rerun_spread"]
        print(f"rerun of fp16 seed {args.seeds[0]}: {rr['values_differing']} of {rr['values_compared']} metric values "
              f"differ; final reward {rr['final_reward'][0]:.3f} and {rr['final_reward'][1]:.3f}")
    print(f"written {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"(benchmark took {time.time() - started:.0f} s)", file=sys.stderr)
    raise SystemExit(code)
