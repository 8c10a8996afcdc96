"""The algorithm knob: the one place where the paper's algorithm names become verl 0.9.1 keys.

Definitions (docs/sources.md#losses, docs/verl.md#rollout-correction), with ρ = π_old/μ the training/inference ratio:
- ``grpo``: PPO-clip policy loss on group-relative advantages (Dr.GRPO when std normalisation is off).
- ``grpo_token_tis``: each token's loss × min(ρ_t, C) (verl decoupled mode, token IS).
- ``grpo_seq_mis``: the sequence's loss × ρ·1{ρ ≤ C} (sequence IS + seq_sum_k1 rejection).
- ``gspo``: GSPO's sequence-level geometric-mean ratio; does not use μ.
- ``pg_seq_is``: REINFORCE, −sg(w)·A·log π with w = Π_t π_θ/μ (verl bypass mode), uncapped.
- ``pg_seq_tis``: the same with w clamped at C (what the authors' oat "seq_mis" scripts ran).
- ``pg_seq_mis``: the same with w·1{w ≤ C} (true masking, as the paper defines MIS).
- ``dapo``: PPO-clip with DAPO's dynamic sampling (group filtering) and overlong reward shaping.

Three verl pitfalls are handled here: rejection bounds of k1 statistics act on 1/ρ (so ``ρ ≤ C`` is the bound
``"1/C_1e6"``); Hydra reads ``0.5_100`` as the number 0.51 (so the bound is quoted); and bypass mode in the V1
trainer ignores ``algorithm.rollout_correction.loss_type`` unless the actor's ``policy_loss`` carries the
settings too.
"""

from __future__ import annotations

from dataclasses import dataclass

from precision_rl.errors import UserError
from precision_rl.verl_ext.reward import DAPO_MANAGER, NAIVE_MANAGER

ALGORITHMS = ("grpo", "grpo_token_tis", "grpo_seq_mis", "gspo", "pg_seq_is", "pg_seq_tis", "pg_seq_mis", "dapo")

# Algorithms whose estimator needs the cap C (``hyper.is_threshold``).
NEEDS_IS_THRESHOLD = ("grpo_token_tis", "grpo_seq_mis", "pg_seq_tis", "pg_seq_mis")
# The algorithm whose correction weighs each token on its own, by min(ρ_t, C).
TOKEN_WEIGHTED = "grpo_token_tis"
# "No cap" for PG-Seq-IS. verl 0.9.1 needs a cap for a sequence weight, and clamps the summed log-ratio at
# ±verl.trainer.ppo.rollout_corr_helper.SAFETY_BOUND (20) before exponentiating, so no weight exceeds e^20 ≈ 4.9e8:
# a cap above that never binds (tests/launch/test_overrides.py checks it against verl's bound).
UNCAPPED = 1.0e9
# The k1 window's upper end, i.e. no lower end on ρ. verl 0.9.1 sums the per-token log-ratios clamped at ±SAFETY_BOUND
# without clamping the sum (compute_rollout_rejection_mask, ``seq_sum_k1``), so no finite ρ floor lies below every
# sequence it can see; verl parses the bound with ``float`` and compares logs, so "inf" keeps them all.
_K1_UNBOUNDED = "inf"


@dataclass(frozen=True)
class AlgorithmSettings:
    """What an algorithm needs from the experiment besides its name (all from ``hyper``)."""

    is_threshold: float | None = None
    filter_groups_metric: str | None = None
    gen_batch_size: int | None = None
    train_batch_size: int | None = None
    overlong_buffer_len: int | None = None
    overlong_penalty_factor: float | None = None
    max_response_length: int | None = None


def check_algorithm(name: object) -> str:
    """Return ``name`` if it is a known algorithm, else raise a UserError listing the known ones."""
    if name not in ALGORITHMS:
        raise UserError(f"unknown algorithm {name!r}: choose one of {', '.join(ALGORITHMS)}")
    return str(name)


def seq_ratio_upper_bound(cap: float) -> str:
    """Return the quoted ``rollout_rs_threshold`` that keeps sequences with ρ ≤ ``cap`` under ``seq_sum_k1``.

    The k1 statistic is −log ρ, so verl's ``"lower_upper"`` keeps 1/upper ≤ ρ ≤ 1/lower: ρ ≤ C needs lower = 1/C,
    and keeping every small ρ needs upper = ∞ (``_K1_UNBOUNDED``).
    """
    if cap <= 0:
        raise UserError(f"the importance-ratio cap must be positive, got {cap}")
    return f'"{1.0 / cap!r}_{_K1_UNBOUNDED}"'


def _correction(prefix: str, rollout_is: str | None, threshold: float | None, rs_cap: float | None) -> list[str]:
    out = [f"{prefix}.rollout_is={rollout_is if rollout_is else 'null'}"]
    if threshold is not None:
        out.append(f"{prefix}.rollout_is_threshold={float(threshold)!r}")
    if rs_cap is not None:
        out += [f"{prefix}.rollout_rs=seq_sum_k1", f"{prefix}.rollout_rs_threshold={seq_ratio_upper_bound(rs_cap)}"]
    return out


def _bypass_reinforce(threshold: float, rs_cap: float | None) -> list[str]:
    """Overrides for the REINFORCE loss with a sequence IS weight against μ (verl bypass mode, both halves)."""
    algo = "algorithm.rollout_correction"
    actor = "+actor_rollout_ref.actor.policy_loss.rollout_correction"
    return (
        [
            f"{algo}.bypass_mode=true",
            f"{algo}.loss_type=reinforce",
            *_correction(algo, "sequence", threshold, rs_cap),
            "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
            f"{actor}.bypass_mode=true",
            f"{actor}.loss_type=reinforce",
        ]
        + _correction(actor, "sequence", threshold, rs_cap)
    )


def _require_cap(name: str, settings: AlgorithmSettings) -> float:
    if settings.is_threshold is None:
        raise UserError(f"algorithm {name} needs hyper.is_threshold (the importance-ratio cap C)")
    try:
        return float(settings.is_threshold)
    except (TypeError, ValueError):
        raise UserError(f"algorithm {name}: hyper.is_threshold must be a number, got {settings.is_threshold!r}") from None


def inflight_gen_batches(settings: AlgorithmSettings) -> int:
    """Return DAPO's generation batch in verl 0.9.1's V1 units: prompts generated at once / train batch, rounded up.

    verl's DAPO recipe samples ``gen_batch_size`` prompts at a time and keeps the groups that pass the filter until
    ``train_batch_size`` are collected. The V1 trainer forces ``data.gen_batch_size`` to 1 and refills filtered groups
    one prompt at a time (``verl.trainer.ppo.v1.trainer_base.PPOTrainer._init_dataloader``), with at most
    ``max_inflight_gen_batches × train_batch_size`` prompts in flight
    (``verl.trainer.ppo.v1.replay_buffer.ReplayBuffer.sample``): that bound is
    where the recipe's generation batch goes.
    """
    return -(-int(settings.gen_batch_size) // int(settings.train_batch_size))


def verl_algorithm_overrides(name: str, settings: AlgorithmSettings) -> list[str]:
    """Return the verl 0.9.1 Hydra overrides that select algorithm ``name`` with ``settings``."""
    check_algorithm(name)
    # Every algorithm scores with a reward manager that tells the reward function which responses were truncated
    # (precision_rl/verl_ext/reward.py): verl's naive manager, or its DAPO manager for DAPO's overlong shaping.
    manager = DAPO_MANAGER if name == "dapo" else NAIVE_MANAGER
    grpo = ["algorithm.adv_estimator=grpo", f"reward.reward_manager.name={manager}"]
    decoupled = "algorithm.rollout_correction"
    if name == "grpo":
        return grpo + ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"] + _correction(decoupled, None, None, None)
    if name == "grpo_token_tis":
        cap = _require_cap(name, settings)
        return grpo + ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"] + _correction(decoupled, "token", cap, None)
    if name == "grpo_seq_mis":
        cap = _require_cap(name, settings)
        return grpo + ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"] + _correction(decoupled, "sequence", cap, cap)
    if name == "gspo":
        return grpo + ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"] + _correction(decoupled, None, None, None)
    if name == "pg_seq_is":
        return grpo + _bypass_reinforce(UNCAPPED, None)
    if name == "pg_seq_tis":
        return grpo + _bypass_reinforce(_require_cap(name, settings), None)
    if name == "pg_seq_mis":
        cap = _require_cap(name, settings)
        return grpo + _bypass_reinforce(cap, cap)
    # dapo
    missing = [f for f in ("filter_groups_metric", "gen_batch_size", "train_batch_size", "overlong_buffer_len",
                           "overlong_penalty_factor", "max_response_length") if getattr(settings, f) is None]
    if missing:
        raise UserError(f"algorithm dapo needs hyper.{', hyper.'.join(missing)}")
    if settings.gen_batch_size <= 0 or settings.train_batch_size <= 0:
        raise UserError(f"algorithm dapo needs positive batch sizes, got gen_batch_size {settings.gen_batch_size} "
                        f"and train_batch_size {settings.train_batch_size}")
    return grpo + [
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        *_correction(decoupled, None, None, None),
        "algorithm.filter_groups.enable=true",
        f"algorithm.filter_groups.metric={settings.filter_groups_metric}",
        f"algorithm.filter_groups.max_inflight_gen_batches={inflight_gen_batches(settings)}",
        "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
        f"+reward.reward_kwargs.overlong_buffer_cfg.len={settings.overlong_buffer_len}",
        f"+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={float(settings.overlong_penalty_factor)!r}",
        "+reward.reward_kwargs.overlong_buffer_cfg.log=false",
        f"+reward.reward_kwargs.max_resp_len={settings.max_response_length}",
    ]
