"""Writers of run directories and offline-mismatch results in the contract formats, with synthetic content.

Used by the analysis tests (which spell out the records they write) and by the analysis benchmark (which
generates many runs). Nothing here is ever read as a real result: synthetic runs live in temporary folders.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from precision_rl import metrics as M
from precision_rl.config.precision import parse_arm
from precision_rl.config.scale import TINY
from precision_rl.launch import runs
from precision_rl.mismatch.layout import SEQUENCES, SUMMARY, TOKENS
from precision_rl.tiny.data import instrument_record
from precision_rl.tiny.shipped import SHIPPED_DIR


def write_run(root: Path, scale: str, experiment: str, precision: str, seed: int, attempts: list,
              algorithm: str = "grpo", status: str = "finished", stamp: str = "20260101T000000Z",
              manifest: dict | None = None) -> Path:
    """Write one run directory under ``root`` and return it.

    ``attempts`` holds one entry per attempt: a list of ``{"step": N, "data": {...}}`` records (float NaN is
    written as null, as verl's file logger does) or the file's raw text. A tiny run records the shipped instrument
    unless ``manifest`` sets ``tiny_instrument``.
    """
    arm = parse_arm(precision)
    run_dir = runs.arm_dir(Path(root), scale, experiment, arm.label) / f"s{seed}-{stamp}"
    run_dir.mkdir(parents=True)
    doc = {
        "run_name": runs.run_name(experiment, arm.label, seed), "experiment": experiment, "scale": scale,
        "algorithm": algorithm, "precision": {"label": arm.label, "train": arm.train, "infer": arm.infer},
        "seed": seed, "status": status, "created": stamp,
        "attempts": [{"attempt": k, "metrics": runs.metrics_path(run_dir, k).name, "started": stamp,
                      "ended": stamp, "status": status} for k in range(len(attempts))],
    }
    if scale == TINY:
        doc["tiny_instrument"] = instrument_record(SHIPPED_DIR)
    doc.update(manifest or {})
    runs.write_manifest(run_dir, doc)
    for k, attempt in enumerate(attempts):
        path = runs.metrics_path(run_dir, k)
        if isinstance(attempt, str):
            path.write_text(attempt)
        else:
            path.write_text("".join(json.dumps(_nulls(r), allow_nan=False) + "\n" for r in attempt))
    return run_dir


def _nulls(record: dict) -> dict:
    data = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in record["data"].items()}
    return {"step": record["step"], "data": data}


def reward_curve(steps: int, rng: np.random.Generator, peak: float = 0.98, collapse_at: int | None = None,
                 start: float = 0.5, noise: float = 0.02) -> np.ndarray:
    """Return a synthetic training reward per step: a rise to ``peak``, optionally a fall to ~0 after ``collapse_at``."""
    t = np.arange(1, steps + 1)
    curve = start + (peak - start) * (1 - np.exp(-t / max(1.0, steps / 6)))
    if collapse_at is not None:
        curve = np.where(t > collapse_at, curve * np.exp(-(t - collapse_at) / max(1.0, steps / 30)), curve)
    return np.clip(curve + rng.normal(0, noise, steps), 0, 1)


def run_records(steps: int, precision: str, rng: np.random.Generator, n_metrics: int = 40,
                collapse_at: int | None = None, val_sets: tuple[str, ...] = ("aime24", "aime25"), val_n: int = 32,
                test_freq: int = 10, bypass: bool = False) -> list[dict]:
    """Return synthetic verl-style records (one per step, ``n_metrics`` metrics each, validation every ``test_freq``).

    Mismatch levels follow the paper's step-0 values (docs/sources.md#headline-numbers) and grow after a collapse.
    """
    reward = reward_curve(steps, rng, collapse_at=collapse_at)
    base_diff = {"bf16": 0.004, "fp16": 0.0007, "fp32": 1e-6}[precision]
    base_kl = {"bf16": 1e-3, "fp16": 1e-5, "fp32": 1e-9}[precision]
    prefix = M.ACTOR_PREFIX if bypass else ""
    records = []
    for k in range(steps):
        step = k + 1
        growth = 1.0 if collapse_at is None or step <= collapse_at else 1.0 + 50.0 * (step - collapse_at) / steps
        data = {
            M.REWARD: float(reward[k]),
            M.RESPONSE_LENGTH: float(6000 - 2000 * k / steps + rng.normal(0, 100)),
            prefix + M.TOKEN_KL_K1: float(base_kl * growth * rng.lognormal(0, 0.3)),
            prefix + M.TOKEN_KL_K3: float(base_kl * growth * rng.lognormal(0, 0.3)),
            M.GRAD_NORM: float(rng.lognormal(0, 0.5)),
        }
        if not bypass:
            data[M.PROBS_DIFF_ABS_MEAN] = float(base_diff * growth * rng.lognormal(0, 0.2))
            data[M.PROBS_DIFF_ABS_MAX] = float(min(1.0, 25 * base_diff * growth))
        data[M.PROBS_DIFF_MAX] = float(min(1.0, 20 * base_diff * growth * rng.lognormal(0, 0.2)))
        data[M.PROBS_DIFF_MIN] = float(-min(1.0, 20 * base_diff * growth * rng.lognormal(0, 0.2)))
        if precision == "fp16":
            data[M.LOSS_SCALE] = 65536.0
            data[M.SKIPPED_STEPS] = 0.0
        filler = 0
        while len(data) < n_metrics:
            data[f"timing_s/synthetic_{filler}"] = float(rng.random())
            filler += 1
        if step % test_freq == 0 or step == 1:
            for ds in val_sets:
                data[f"val-core/{ds}/acc/mean@{val_n}"] = float(0.2 + 0.2 * reward[k] + rng.normal(0, 0.01))
        records.append({"step": step, "data": data})
    return records


def write_mismatch_result(root: Path, model: str, train: str, infer: str, rng: np.random.Generator,
                          n_sequences: int = 64, max_len: int = 2000, scale: str | None = None,
                          per_token_kl: float = 1e-3) -> Path:
    """Write a synthetic offline-mismatch result folder ``root/<model>/<train>-<infer>/`` and return it."""
    out = Path(root) / model / f"{train}-{infer}"
    out.mkdir(parents=True)
    lengths = rng.integers(16, max_len, n_sequences)
    seq_rows, token_frames = [], []
    for seq_id, length in enumerate(lengths):
        logp_infer = np.log(rng.uniform(0.05, 1.0, length))
        noise = rng.normal(-per_token_kl, np.sqrt(2 * per_token_kl), length)
        logp_train = np.minimum(logp_infer + noise, 0.0)
        token_frames.append(pd.DataFrame({"seq_id": seq_id, "position": np.arange(length),
                                          "token_id": rng.integers(0, 512, length), "logp_infer": logp_infer,
                                          "logp_train": logp_train}))
        seq_rows.append({"seq_id": seq_id, "prompt_id": seq_id // 8, "length": int(length),
                         "log_ratio": float(np.sum(logp_train - logp_infer))})
    tokens = pd.concat(token_frames, ignore_index=True)
    seqs = pd.DataFrame(seq_rows)
    tokens.to_parquet(out / TOKENS, index=False)
    seqs.to_parquet(out / SEQUENCES, index=False)
    slope = float(np.polyfit(seqs["length"] / 1000.0, seqs["log_ratio"], 1)[0])
    diff = np.exp(tokens["logp_train"]) - np.exp(tokens["logp_infer"])
    summary = {"train_dtype": train, "infer_dtype": infer, "n_sequences": int(len(seqs)), "n_tokens": int(len(tokens)),
               "token_k1_kl": float(np.mean(tokens["logp_infer"] - tokens["logp_train"])), "token_k3_kl": None,
               "mean_abs_prob_diff": float(np.mean(np.abs(diff))), "max_abs_prob_diff": float(np.max(np.abs(diff))),
               "max_prob_diff": float(diff.max()), "min_prob_diff": float(diff.min()),
               "seq_kl": float(-seqs["log_ratio"].mean()), "slope_per_1k": slope, "frac_equal": 0.0}
    if scale:
        summary["scale"] = scale
    (out / SUMMARY).write_text(json.dumps(summary, indent=2))
    return out
