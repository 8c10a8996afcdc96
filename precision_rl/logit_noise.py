"""The synthetic mismatch: seeded Gaussian noise added to a policy's logits, the same function of the context in any
process, so that the rollout engine and the trainer can add exactly the same perturbation.

The noise added to the logit of token ``v`` after the tokens ``x_1 .. x_t`` (prompt and response so far) is
``sigma * N[mix(h(x_1..x_t), v, seed)]``: ``h`` is a polynomial hash of the prefix modulo a 31-bit prime, ``mix`` an
integer hash of 32 bits, and ``N`` a table of 2^16 standard-normal quantiles (tails cut at ±4.3). Everything before
the table lookup is integer arithmetic that fits in int64, so a vectorized trainer and a token-by-token sampler get
bit-identical noise; the table is one fixed tensor. Drawing from ``softmax(z + noise)`` while the trainer computes
``softmax(z)`` is a mismatch whose size ``sigma`` sets; adding the noise on both sides is its control (the same
worse sampler, no mismatch).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import torch

PRIME = 2**31 - 1  # the prefix hash's modulus: h * BASE + token + 1 stays below 2^62
BASE = 1_000_003
MASK32 = 2**32 - 1
MIX_MULTIPLIERS = (0x7FEB352D, 0x2C1B3C6D)  # below 2^31: a product with a 32-bit value stays below 2^63
SEED_SALT = 0x5BD1E995
TABLE_BITS = 16
TABLE_MASK = (1 << TABLE_BITS) - 1

# The environment variables that carry a run's noise to every process (Ray hands them to the trainer's workers and
# the rollout engine alike).
SIGMA_ENV = "PRECISION_RL_LOGIT_NOISE"  # the noise's standard deviation in logit units; unset or 0: none
SEED_ENV = "PRECISION_RL_LOGIT_NOISE_SEED"  # which noise field (the run's seed)
IN_TRAINER_ENV = "PRECISION_RL_LOGIT_NOISE_IN_TRAINER"  # "1": the trainer adds it too (the control)


@dataclass(frozen=True)
class LogitNoise:
    """A synthetic perturbation of the rollout's logits: its strength, its seed, and whether the trainer adds it
    too (the control)."""

    sigma: float  # standard deviation of the noise added to each logit, in logit units (before the temperature)
    seed: int  # selects the noise field; the same seed gives the same noise for the same context
    in_trainer: bool = False  # the control: the trainer's logits carry the same noise, so rollout and trainer agree

    def __post_init__(self):
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"the logit noise's strength must be a finite number >= 0, got {self.sigma!r}")
        if self.seed < 0:
            raise ValueError(f"the logit noise's seed must be >= 0, got {self.seed!r}")

    def env(self) -> dict[str, str]:
        """Return the environment variables that hand this noise to every process of a run."""
        return {SIGMA_ENV: repr(float(self.sigma)), SEED_ENV: str(self.seed), IN_TRAINER_ENV: str(int(self.in_trainer))}


def noise_from_env(environ: dict[str, str] | None = None) -> LogitNoise | None:
    """Return the noise the environment names, or None when it names none (unset or a strength of 0)."""
    environ = os.environ if environ is None else environ
    text = environ.get(SIGMA_ENV, "").strip()
    if not text or float(text) == 0:
        return None
    return LogitNoise(float(text), int(environ.get(SEED_ENV, "0")), environ.get(IN_TRAINER_ENV, "0") == "1")


def extend_hash(hashes: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Return the prefix hashes ``hashes`` (int64) extended by one token each (``tokens``, int64)."""
    return (hashes * BASE + tokens + 1) % PRIME


def prefix_hash(tokens: list[int], start: int = 0) -> int:
    """Return the hash of a prefix: ``tokens`` after a prefix that hashes to ``start`` (the empty prefix hashes to
    0)."""
    value = start
    for token in tokens:
        value = (value * BASE + int(token) + 1) % PRIME
    return value


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = x & MASK32
    x = x ^ (x >> 16)
    x = (x * MIX_MULTIPLIERS[0]) & MASK32
    x = x ^ (x >> 15)
    x = (x * MIX_MULTIPLIERS[1]) & MASK32
    return x ^ (x >> 16)


@functools.lru_cache(maxsize=None)
def normal_table() -> torch.Tensor:
    """Return the 2^16 standard-normal quantiles at the midpoints of equal-probability bins (float32), in the fixed
    shuffled order of their integer hashes."""
    size = 1 << TABLE_BITS
    quantiles = torch.special.ndtri((torch.arange(size, dtype=torch.float64) + 0.5) / size).to(torch.float32)
    return quantiles[torch.argsort(_mix32(torch.arange(size, dtype=torch.int64)))]


def noise(hashes: torch.Tensor, vocab_size: int, seed: int) -> torch.Tensor:
    """Return the standard-normal noise [len(hashes), vocab_size] (float32) of the contexts whose prefix hashes are
    ``hashes``, for noise field ``seed``.

    A context's key picks a start and an odd stride through the shuffled table, so its ``vocab_size`` values are
    distinct entries of the table (up to 2^16 tokens; larger vocabularies wrap around).
    """
    salt = _mix32(torch.tensor((seed * 2 + 1) & MASK32, dtype=torch.int64) * SEED_SALT)
    keys = _mix32(hashes.to(torch.int64) ^ salt)
    start, stride = keys & TABLE_MASK, ((keys >> TABLE_BITS) | 1)
    index = (start[:, None] + stride[:, None] * torch.arange(vocab_size, dtype=torch.int64)[None, :]) & TABLE_MASK
    return normal_table()[index]


def packed_prefix_hashes(tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Return, for every token of sequences packed end to end (``tokens`` [N], sequence starts and end in
    ``offsets`` [B + 1]), the hash of its sequence's prefix up to and including it ([N], int64)."""
    lengths = offsets.diff()
    count = int(lengths.numel())
    longest = int(lengths.max()) if count else 0
    starts = offsets[:-1].to(torch.int64)
    out = torch.empty_like(tokens, dtype=torch.int64)
    hashes = torch.zeros(count, dtype=torch.int64)
    for position in range(longest):
        alive = lengths > position
        where = starts[alive] + position
        hashes[alive] = extend_hash(hashes[alive], tokens[where].to(torch.int64))
        out[where] = hashes[alive]
    return out
