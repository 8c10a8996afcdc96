"""Metric names (the keys verl and the suite's extensions log) and the quantities the analysis reads from them.

verl's names are kept verbatim. Our additions use the ``mismatch/`` and ``precision/`` prefixes; the verl extensions
that log them (``precision_rl/verl_ext``) import the constants from here. A *quantity* is what
a figure or table shows; it reads the first of its candidate metric names that a run logged, e.g. the token KL
of a run in verl's bypass mode (pg_* algorithms) appears as ``actor/rollout_corr/kl`` instead of
``rollout_corr/kl``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- verl 0.9.1 names (docs/verl.md#metrics) ---
REWARD = "critic/score/mean"
RESPONSE_LENGTH = "response_length/mean"
ENTROPY = "actor/entropy"
GRAD_NORM = "actor/grad_norm"  # non-finite (logged as null) when the fp16 loss scaler skipped the step
# |exp(log π_old) − exp(log μ)| over response tokens (absolute values only); absent in bypass mode.
PROBS_DIFF_ABS_MAX = "training/rollout_probs_diff_max"
PROBS_DIFF_ABS_MEAN = "training/rollout_probs_diff_mean"
# Token-level KL(μ‖π_old) estimates: k1 = mean(log μ − log π), k3 = mean(ρ − 1 − log ρ) with ρ = π/μ.
TOKEN_KL_K1 = "rollout_corr/kl"
TOKEN_KL_K3 = "rollout_corr/k3_kl"
ACTOR_PREFIX = "actor/"  # verl's actor worker logs under actor/: in bypass mode the rollout_corr metrics too
TIMING_PREFIX = "timing_s/"  # verl times each phase of a step as timing_s/<phase>
# Metrics that measure the machine (time, throughput, memory): no rerun repeats them, a repeatable run every other.
MEASURED_PREFIXES = (TIMING_PREFIX, "timing_per_token_ms/", "perf/", "actor/perf/")
STEP_TIME = TIMING_PREFIX + "step"
TOTAL_TOKENS = "perf/total_num_tokens"  # verl: the step's prompt and response tokens, whole batch
# The phases of a step (timing_s/<phase>) that benchmarks and step-range summaries report: rollout, the training
# engine's recompute of the old log-probs, advantages, the actor update and the weight sync to the rollout engine.
STEP_PHASES = ("gen", "old_log_prob", "adv", "update_actor", "update_weights")
VAL_CORE_PREFIX = "val-core/"

# --- our additions ---
# Signed max / min over the step's response tokens of π − μ (token probabilities of the sampled tokens under the
# training engine and the inference engine): the paper's Fig. 3 column 4. verl logs only |π − μ|.
PROBS_DIFF_MAX = "mismatch/probs_diff_max"
PROBS_DIFF_MIN = "mismatch/probs_diff_min"
# FP16's max/min of π − μ stay within about ±0.1 in the paper (its Fig. 3, read in docs/figures.md). A training
# step with a token beyond it writes the responses behind it to EXTREMES_FILE in its run directory.
PAPER_FP16_PROBS_DIFF_EXTREME = 0.1
# Median over the step's response tokens of |log π − log μ|. verl's token means (mean |π − μ|, k1, k3) are
# heavy-tailed: at a position where the model is ill-conditioned a format's rounding moves a log-probability by
# nats, and one such token in a small batch moves the step's k3 by 10x or more (docs/tiny.md#the-mismatch-across-cpu-kinds).
# The median is set by the format's rounding of the typical token; it is 0 where most tokens' log-probabilities agree
# exactly (confident tokens at T=1).
ABS_LOG_RATIO_MEDIAN = "mismatch/abs_log_ratio_median"
# The paper's KL[μ‖π] per sequence (its Fig. 5: 0.32 FP16, 7.64 BF16 for R1D-1.5B): the mean over the step's
# responses of Σ_t (log μ − log π) over each response's tokens, sampled from μ. verl's KL metrics are per token.
SEQUENCE_KL = "mismatch/sequence_kl_mean"
# The same KL estimated with k3 per token, (π/μ − 1) − log(π/μ), summed over each response and averaged: unbiased for
# KL[μ‖π] per sequence as k1's sum is (its expectation under μ given the prefix is the token KL), never negative,
# and far less noisy on a small batch. The ladder's dose is read from it.
SEQUENCE_KL_K3 = "mismatch/sequence_kl_k3_mean"
PAPER_SEQUENCE_KL = {"fp16": 0.32, "bf16": 7.64}  # docs/figures.md#fig-5-offline-mismatch
EXTREMES_FILE = "mismatch_extremes.jsonl"
# The fp16 dynamic loss scale after the step, and the cumulative number of optimizer steps the scaler has
# skipped (inf/NaN gradients) since the start of the run.
LOSS_SCALE = "precision/loss_scale"
SKIPPED_STEPS = "precision/skipped_steps"

# Prefixes of every metric family verl 0.9.1 or our trainers log; names outside them draw one warning on load.
KNOWN_PREFIXES = (
    "critic/", "response_length/", "response_length_non_aborted/", "response/", "prompt_length/", "actor/",
    "training/", "rollout_corr/", "rollout/", "val-core/", "val-aux/", "timing_s/", "timing_per_token_ms/", "perf/",
    "global_seqlen/", "num_turns/", "tool_call_counts/", "variance_proxy/", "train/", "mismatch/", "precision/",
)


@dataclass(frozen=True)
class Quantity:
    """Something a figure or table shows, read from the first of ``candidates`` that a run logged."""

    key: str
    label: str
    candidates: tuple[str, ...]


def _with_bypass(name: str) -> tuple[str, str]:
    return (name, ACTOR_PREFIX + name)


REWARD_Q = Quantity("reward", "Training reward", (REWARD,))
RESPONSE_LENGTH_Q = Quantity("response_length", "Response length (tokens)", (RESPONSE_LENGTH,))
MEAN_ABS_DIFF_Q = Quantity("mean_abs_diff", "Mean |π − μ|", (PROBS_DIFF_ABS_MEAN,))
TOKEN_KL_K1_Q = Quantity("token_kl_k1", "KL[μ‖π] per token (k1)", _with_bypass(TOKEN_KL_K1))
TOKEN_KL_K3_Q = Quantity("token_kl_k3", "KL[μ‖π] per token (k3)", _with_bypass(TOKEN_KL_K3))
# The figures' and checks' token KL: k3 where logged (unbiased for KL(μ‖π) and never negative, so it fits a log
# axis; docs/verl.md#vllm-on-cpu finds k1 noise-dominated on small models), else k1.
TOKEN_KL_Q = Quantity("token_kl", "KL[μ‖π] per token", _with_bypass(TOKEN_KL_K3) + _with_bypass(TOKEN_KL_K1))
ABS_LOG_RATIO_MEDIAN_Q = Quantity("abs_log_ratio_median", "Median |log π − log μ| per token", (ABS_LOG_RATIO_MEDIAN,))
SEQUENCE_KL_Q = Quantity("sequence_kl", "KL[μ‖π] per sequence (k1)", (SEQUENCE_KL,))
SEQUENCE_KL_K3_Q = Quantity("sequence_kl_k3", "KL[μ‖π] per sequence", (SEQUENCE_KL_K3,))
PROBS_DIFF_MAX_Q = Quantity("probs_diff_max", "max of π − μ", (PROBS_DIFF_MAX,))
PROBS_DIFF_ABS_MAX_Q = Quantity("probs_diff_abs_max", "max |π − μ|", (PROBS_DIFF_ABS_MAX,))
PROBS_DIFF_MIN_Q = Quantity("probs_diff_min", "min of π − μ", (PROBS_DIFF_MIN,))
SKIPPED_STEPS_Q = Quantity("skipped_steps", "Skipped fp16 steps (cumulative)", (SKIPPED_STEPS,))
GRAD_NORM_Q = Quantity("grad_norm", "Gradient norm", (GRAD_NORM,))
STEP_TIME_Q = Quantity("step_time", "Step time (s)", (STEP_TIME,))
ENTROPY_Q = Quantity("entropy", "Entropy (per token)", (ENTROPY,))

_VAL_RE = re.compile(rf"^{re.escape(VAL_CORE_PREFIX)}(?P<ds>.+)/(?P<var>acc|reward)/mean@(?P<n>\d+)$")


def resolve(quantity: Quantity, logged: set[str] | frozenset[str]) -> str | None:
    """Return the first of ``quantity``'s candidate names present in ``logged``, or None."""
    for name in quantity.candidates:
        if name in logged:
            return name
    return None


def val_metric(logged: set[str] | frozenset[str], data_source: str) -> str | None:
    """Return the validation-accuracy metric of ``data_source`` among ``logged``, or None.

    verl's core validation metric is ``val-core/<data_source>/acc/mean@<n>`` (``reward`` when the reward function
    returns no ``acc``, as verl itself chooses); with several sample counts the largest ``n`` wins.
    """
    best: tuple[int, int, str] | None = None
    for name in logged:
        match = _VAL_RE.match(name)
        if match and match["ds"] == data_source:
            rank = (1 if match["var"] == "acc" else 0, int(match["n"]), name)
            best = rank if best is None or rank > best else best
    return best[2] if best else None


def val_data_sources(logged: set[str] | frozenset[str]) -> list[str]:
    """Return the data sources that have a core validation metric among ``logged``, sorted."""
    return sorted({m["ds"] for m in map(_VAL_RE.match, logged) if m})


def is_known(name: str) -> bool:
    """Return True when ``name`` belongs to a metric family verl or our trainers log."""
    return name.startswith(KNOWN_PREFIXES)
