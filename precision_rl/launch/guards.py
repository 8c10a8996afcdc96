"""Configurations verl 0.9.1 runs without complaint that would silently change an arm's precision, refused before
launch.

Two of verl's rollout weight-sync paths round every floating-point weight to bf16 before the rollout engine loads
it, whatever the training dtype. An arm whose rollout runs in fp16 or fp32 would then carry BF16's rounding in its
rollout weights: the FP16 arm would measure BF16's mismatch.
"""

from __future__ import annotations

from precision_rl.config.precision import PrecisionArm

# (config path, the value that takes the path, verl 0.9.1's symbol that casts to bf16)
BF16_WEIGHT_SYNCS = (
    ("actor_rollout_ref.model.lora.merge", True,
     "verl.workers.engine.fsdp.transformer_impl.FSDPEngine._merged_lora_per_tensor_param"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend", "delta_sharded",
     "verl.workers.engine.fsdp.transformer_impl.FSDPEngine.get_per_tensor_param_shard"),
)


def _value(cfg, path: str):
    node = cfg
    for part in path.split("."):
        node = node.get(part) if hasattr(node, "get") else None
        if node is None:
            return None
    return node


def bf16_weight_sync_problem(cfg, arm: PrecisionArm) -> str | None:
    """Return why the composed verl config ``cfg`` may not run ``arm`` (a weight sync that rounds to bf16 feeding a
    rollout in another dtype), or None."""
    if arm.rollout_dtype == "bf16":
        return None
    for path, value, symbol in BF16_WEIGHT_SYNCS:
        if _value(cfg, path) == value:
            return (f"{path}={str(value).lower()} syncs the rollout's weights through {symbol}, which rounds them to "
                    f"bf16: the {arm.label} arm's {arm.rollout_dtype} rollout would run on BF16 weights")
    return None
