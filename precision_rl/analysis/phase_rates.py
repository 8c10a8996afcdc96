"""How close each phase of a tiny training step runs to the CPU's fp32 peak: the matrix FLOPs a phase must do, from
the model's shape and the tokens the step processed, divided by its time (verl's ``timing_s/<phase>``).

A phase's FLOPs count the linear layers and the LM head only (attention scores and everything else are a few per
cent at the tiny model's 128-token contexts): 2 per weight per token for a forward pass, 6 for a forward and
backward pass. Generation runs every token of the batch forward once (the prompt's prefill and the sampled tokens'
decoding), the old log-probabilities once more, and the update forward and backward once per PPO epoch. The peak
is cores × clock × fp32 FLOP per cycle and core: 32 for two 256-bit FMA pipes (AVX2 CPUs and AMD's Zen 4/5, whose
AVX-512 runs on the same pipes), 64 for Intel CPUs with AVX-512 (two 512-bit FMA pipes); a nominal figure, from the
CPU's flags and clock.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

GENERATION, OLD_LOG_PROB, UPDATE = "gen", "old_log_prob", "update_actor"
PASSES = {GENERATION: 2, OLD_LOG_PROB: 2, UPDATE: 6}  # FLOPs per weight per token
HALF_PEAK = 0.5  # a phase below this share of the peak needs a measured reason (issue: steps near the CPU's limit)


@dataclass(frozen=True)
class PhaseRate:
    """One phase's work, time and achieved rate."""

    phase: str
    flops: float
    seconds: float

    @property
    def rate(self) -> float:
        """Return the achieved FLOP rate (FLOP/s)."""
        return self.flops / self.seconds if self.seconds > 0 else float("nan")


def matmul_weights(config: dict) -> int:
    """Return the weights of a decoder's linear layers and LM head (embeddings' lookups and norms aside), from its HF
    ``config.json`` (Qwen2/Llama shape: grouped-query attention, gated MLP)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads", heads) * head_dim
    attention = hidden * heads * head_dim * 2 + hidden * kv * 2
    mlp = 3 * hidden * config["intermediate_size"]
    return layers * (attention + mlp) + hidden * config["vocab_size"]


def step_rates(weights: int, tokens: float, seconds: dict[str, float], ppo_epochs: int = 1) -> list[PhaseRate]:
    """Return the rate of each timed phase of a step that processed ``tokens`` (prompt and response, the whole
    batch): ``seconds`` maps a phase name to its time."""
    out = []
    for phase, per_token in PASSES.items():
        if phase in seconds:
            epochs = ppo_epochs if phase == UPDATE else 1
            out.append(PhaseRate(phase, per_token * weights * tokens * epochs, seconds[phase]))
    return out


def flop_per_cycle(vendor: str, flags: set[str]) -> int:
    """Return the nominal fp32 FLOP per cycle and core of a CPU from its vendor id and flags."""
    if "avx512f" in flags and vendor == "GenuineIntel":
        return 64
    return 32 if "fma" in flags else 16


def cpu_peak(cpuinfo: str | None = None) -> tuple[float, str] | None:
    """Return this machine's nominal fp32 peak (FLOP/s) and how it was computed, from ``/proc/cpuinfo``; None
    where the clock or flags are not there."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.is_file() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "cpu MHz" not in fields or "flags" not in fields:
        return None
    cores = len(os.sched_getaffinity(0))
    per_cycle = flop_per_cycle(fields.get("vendor_id", ""), set(fields["flags"].split()))
    ghz = float(fields["cpu MHz"]) / 1000
    return cores * ghz * 1e9 * per_cycle, f"{cores} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle"


def model_config(model_path: str | Path) -> dict:
    """Return the HF ``config.json`` of a local model folder."""
    return json.loads((Path(model_path) / "config.json").read_text())
