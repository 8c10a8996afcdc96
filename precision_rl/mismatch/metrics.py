"""Summary numbers of a (train, infer) pair, computed from the token and sequence tables alone."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

RATIO_KEYS = ("token_k1_kl", "token_k3_kl", "exact_kl", "mean_abs_prob_diff", "max_abs_prob_diff", "seq_kl",
              "exact_seq_kl", "log_ratio_std")


def _num(x) -> float | None:
    """Return ``x`` as a float, or None for NaN/inf (JSON has neither)."""
    x = float(x)
    return x if math.isfinite(x) else None


TOKEN_METRIC_NAMES = ("token_k1_kl", "token_k3_kl", "token_k3_kl_median", "token_k3_kl_p99", "mean_abs_prob_diff",
                      "max_abs_prob_diff", "max_prob_diff", "min_prob_diff", "frac_equal")


def token_k3(logp_infer: np.ndarray, logp_train: np.ndarray) -> np.ndarray:
    """Return each sampled token's k3 estimate of KL[μ‖π]: ρ − 1 − log ρ with ρ = π/μ (never negative)."""
    log_rho = np.asarray(logp_train, dtype=np.float64) - np.asarray(logp_infer, dtype=np.float64)
    return np.expm1(log_rho) - log_rho


def token_metrics(logp_infer: np.ndarray, logp_train: np.ndarray) -> dict:
    """Return the sampled-token metrics (``TOKEN_METRIC_NAMES``): k1 and k3 KL (k3's mean, median and 99th
    percentile: the per-token KL is heavy-tailed), mean/max |pi-mu|, signed max/min of pi-mu, frac equal."""
    mu, pi = np.asarray(logp_infer, dtype=np.float64), np.asarray(logp_train, dtype=np.float64)
    if mu.size == 0:
        return dict.fromkeys(TOKEN_METRIC_NAMES)
    log_rho = pi - mu
    k3 = token_k3(mu, pi)
    diff = np.exp(pi) - np.exp(mu)
    return {
        "token_k1_kl": _num(np.mean(-log_rho)),
        "token_k3_kl": _num(np.mean(k3)),
        "token_k3_kl_median": _num(np.median(k3)),
        "token_k3_kl_p99": _num(np.percentile(k3, 99)),
        "mean_abs_prob_diff": _num(np.mean(np.abs(diff))),
        "max_abs_prob_diff": _num(np.max(np.abs(diff))),
        "max_prob_diff": _num(np.max(diff)),
        "min_prob_diff": _num(np.min(diff)),
        "frac_equal": _num(np.mean(pi == mu)),
    }


def fit_slope(length: np.ndarray, log_ratio: np.ndarray) -> tuple[float | None, float | None]:
    """Return the least-squares (slope, intercept) of the sequence log-ratio against length; slope in nats per
    1K tokens. None when fewer than two distinct lengths exist."""
    x, y = np.asarray(length, dtype=np.float64) / 1000.0, np.asarray(log_ratio, dtype=np.float64)
    if x.size < 2 or np.unique(x).size < 2:
        return None, None
    slope, intercept = np.polyfit(x, y, 1)
    return _num(slope), _num(intercept)


def sequence_table(tokens: pd.DataFrame, seq_prompt: dict[int, int], seq_length: dict[int, int]) -> pd.DataFrame:
    """Return sequences.parquet's table: seq_id, prompt_id, length, log_ratio = sum_t (log pi - log mu)."""
    sums = (tokens["logp_train"] - tokens["logp_infer"]).groupby(tokens["seq_id"]).sum()
    seq_ids = sorted(seq_prompt)
    return pd.DataFrame({
        "seq_id": np.array(seq_ids, dtype=np.int64),
        "prompt_id": np.array([seq_prompt[s] for s in seq_ids], dtype=np.int64),
        "length": np.array([seq_length[s] for s in seq_ids], dtype=np.int64),
        "log_ratio": np.array([float(sums.get(s, 0.0)) for s in seq_ids], dtype=np.float64),
    })


def summarize(tokens: pd.DataFrame, sequences: pd.DataFrame) -> dict:
    """Return the pair's numbers from its tables: token metrics, exact KL (if the tokens carry it), sequence KL
    [mu||pi] = -mean log_ratio (the paper's definition) and by k3 (the mean over sequences of their tokens' k3 sum),
    the log-ratio's std and the slope against length."""
    out = {"n_sequences": int(len(sequences)), "n_tokens": int(len(tokens))}
    out.update(token_metrics(tokens["logp_infer"].to_numpy(), tokens["logp_train"].to_numpy()))
    if "exact_kl" in tokens.columns and len(tokens) and tokens["exact_kl"].notna().all():
        out["exact_kl"] = _num(tokens["exact_kl"].mean())
        per_seq = tokens.groupby("seq_id")["exact_kl"].sum()
        out["exact_seq_kl"] = _num(per_seq.reindex(sequences["seq_id"], fill_value=0.0).mean())
    else:
        out["exact_kl"] = out["exact_seq_kl"] = None
    ratio = sequences["log_ratio"].to_numpy()
    out["seq_kl"] = _num(-ratio.mean()) if ratio.size else None
    k3_sums = pd.Series(token_k3(tokens["logp_infer"].to_numpy(), tokens["logp_train"].to_numpy()),
                        index=tokens["seq_id"].to_numpy()).groupby(level=0).sum()
    out["seq_kl_k3"] = _num(k3_sums.reindex(sequences["seq_id"], fill_value=0.0).mean()) if ratio.size else None
    out["log_ratio_std"] = _num(ratio.std()) if ratio.size else None
    out["mean_length"] = _num(sequences["length"].mean()) if ratio.size else None
    out["slope_per_1k"], out["intercept"] = fit_slope(sequences["length"].to_numpy(), ratio)
    return out


def ratios(bf16: dict, fp16: dict) -> dict:
    """Return bf16 / fp16 for each metric in RATIO_KEYS where both are positive numbers."""
    out = {}
    for key in RATIO_KEYS:
        a, b = bf16.get(key), fp16.get(key)
        out[key] = a / b if isinstance(a, float) and isinstance(b, float) and a > 0 and b > 0 else None
    return out
