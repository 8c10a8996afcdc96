"""Benchmark of the tiny scale (`make bench-tiny`): the README's numbers come from here.

Runs `make sanity-fp16` and `make sanity-bf16` (tiny scale, default profile) as subprocesses, timing each wall to
wall, then reads their metrics: final training reward, per-step time breakdown, the trainer's tokens/s against a
bare HF forward+backward on a batch of the same shape, and the bf16/fp16 mismatch ratio. Writes
results/bench/tiny-<UTC>.json and prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from precision_rl import REPO_ROOT, runs
from precision_rl.precision import VLLM_DTYPES

STEP_PARTS = ("gen", "reward", "old_log_prob", "adv", "update_actor", "sync", "step")


def run_arm(precision: str, seed: int, experiment: str) -> tuple[Path, float]:
    """Run one arm through the CLI; return its run directory and wall seconds (model build excluded if cached)."""
    started = time.time()
    cmd = [sys.executable, "-m", "precision_rl", "run", experiment, "--scale", "tiny", "--precision", precision,
           "--seed", str(seed)]
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    run_dir = runs.latest_run_dir(runs.runs_root(), "tiny", experiment, precision, seed)
    return run_dir, time.time() - started


def summarize(run_dir: Path) -> dict:
    """Return the reward, timing and mismatch summary of one finished run."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x["data"] for x in lines if x["step"] > 0]
    get = lambda key: np.array([s[key] for s in steps if s.get(key) is not None], dtype=float)  # noqa: E731
    reward = get("critic/score/mean")
    val = [(x["step"], v) for x in lines for k, v in x["data"].items() if k.startswith("val-core/")]
    return {
        "run_dir": str(run_dir), "steps": len(steps), "reward_curve": reward.round(4).tolist(),
        "final_reward_last5": float(reward[-5:].mean()), "max_reward": float(reward.max()),
        "first_step_reaching_0.95": next((i + 1 for i, r in enumerate(reward) if r >= 0.95), None),
        "val_acc": val, "step_seconds": {p: float(get(f"timing_s/{p}").mean()) for p in STEP_PARTS},
        "tokens_per_s": float(get("perf/throughput").mean()),
        "mean_abs_prob_diff": float(get("training/rollout_probs_diff_mean").mean()),
        "k3_kl": float(get("rollout_corr/k3_kl").mean()), "k1_kl": float(get("rollout_corr/kl").mean()),
        "skipped_steps": float(get("precision/skipped_steps")[-1]), "loss_scale_final": float(get("precision/loss_scale")[-1]),
        "tokens_per_step": float(get("perf/total_num_tokens").mean()),
    }


def bare_hf_tokens_per_s(model_dir: Path, dtype: str, n_seqs: int, length: int, repeats: int = 3) -> float:
    """Return tokens/s of a bare HF forward+backward (autocast in ``dtype``) on an ``n_seqs`` x ``length`` batch."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (n_seqs, length))
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=getattr(torch, dtype)):
            logits = model(input_ids=ids).logits
        torch.log_softmax(logits.float(), -1).mean().backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return n_seqs * length / float(np.median(times[1:]))


def main() -> int:
    """Run the benchmark and print its summary; return 0."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiment", default="sanity/grpo")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--existing", action="store_true",
                        help="summarize the newest finished runs of both arms instead of launching new ones")
    args = parser.parse_args()
    from precision_rl.tiny.pretrain import ensure_tiny_model

    t = time.time()
    model_dir = ensure_tiny_model()
    build_s = time.time() - t
    out = {"experiment": args.experiment, "seed": args.seed, "model_build_or_cache_s": round(build_s, 1),
           "machine": runs.hardware()}
    for precision in ("fp16", "bf16"):
        if args.existing:
            run_dir = runs.latest_run_dir(runs.runs_root(), "tiny", args.experiment, precision, args.seed)
            if run_dir is None:
                raise SystemExit(f"error: no tiny run of {args.experiment} {precision} seed {args.seed} to summarize")
            attempt = runs.read_manifest(run_dir)["attempts"][0]
            parse = lambda t: time.mktime(time.strptime(t, "%Y%m%dT%H%M%SZ"))  # noqa: E731
            wall = parse(attempt["ended"]) - parse(attempt["started"])
        else:
            run_dir, wall = run_arm(precision, args.seed, args.experiment)
        summary = summarize(run_dir)
        summary["wall_s"] = round(wall, 1)
        manifest = runs.read_manifest(run_dir)
        settings = manifest["tiny"]["settings"]
        seqs = settings["train_batch_size"] * settings["rollout_n"]
        length = int(round(summary["tokens_per_step"] / seqs))
        summary["bare_hf_tokens_per_s"] = bare_hf_tokens_per_s(model_dir, VLLM_DTYPES[precision],
                                                               seqs, length)
        # The trainer's recompute + update do one forward and one forward+backward per token.
        update_tokens_per_s = summary["tokens_per_step"] / summary["step_seconds"]["update_actor"]
        summary["update_tokens_per_s"] = update_tokens_per_s
        summary["update_vs_bare_ratio"] = update_tokens_per_s / summary["bare_hf_tokens_per_s"]
        out[precision] = summary
    out["bf16_over_fp16"] = {k: out["bf16"][k] / out["fp16"][k] for k in ("mean_abs_prob_diff", "k3_kl")}
    dest = REPO_ROOT / "results" / "bench" / f"tiny-{runs.utc_stamp()}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2))
    print("\n| arm | wall (s) | final reward (last 5) | first step >= 0.95 | step s (gen / recompute / update / sync) "
          "| update tok/s vs bare HF | mean abs(pi-mu) | k3 KL |\n|---|---|---|---|---|---|---|---|")
    for p in ("fp16", "bf16"):
        s = out[p]
        t_ = s["step_seconds"]
        print(f"| {p} | {s['wall_s']} | {s['final_reward_last5']:.3f} | {s['first_step_reaching_0.95']} | "
              f"{t_['step']:.1f} ({t_['gen']:.1f} / {t_['old_log_prob']:.1f} / {t_['update_actor']:.1f} / {t_['sync']:.2f}) | "
              f"{s['update_tokens_per_s']:.0f} vs {s['bare_hf_tokens_per_s']:.0f} ({s['update_vs_bare_ratio']:.2f}) | "
              f"{s['mean_abs_prob_diff']:.2e} | {s['k3_kl']:.2e} |")
    r = out["bf16_over_fp16"]
    print(f"\nbf16/fp16 mismatch ratio: mean |pi-mu| {r['mean_abs_prob_diff']:.1f}x, k3 KL {r['k3_kl']:.1f}x; written {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
