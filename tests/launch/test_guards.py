"""Refused before launch: a weight sync that rounds an FP16 or FP32 rollout's weights to bf16 (verl 0.9.1 takes two
such paths), and another verl than the one the extensions are written against."""

import inspect
from importlib import import_module

import pytest

from precision_rl.config import registry
from precision_rl.config.precision import PrecisionArm
from precision_rl.config.scale import ScaleDecision
from precision_rl.errors import UserError
from precision_rl.launch import runner
from precision_rl.launch.guards import BF16_WEIGHT_SYNCS, bf16_weight_sync_problem
from precision_rl.launch.overrides import compose, config_name
from precision_rl.verl_ext import version as verl_version

PAPER = ScaleDecision("auto", "paper", "test")


def _cfg(spec, arm: PrecisionArm, *extra: str):
    plan = runner.plan_run(spec, arm, PAPER, runner.RunOptions(dry_run=True, extra=extra))
    return plan, compose(config_name(spec), plan.overrides)


@pytest.mark.parametrize("name", sorted(registry.load_all("paper")))
def test_no_registered_arm_syncs_its_rollout_weights_through_bf16(name, tmp_path, monkeypatch):
    monkeypatch.setenv("PRECISION_RL_RUNS", str(tmp_path))
    spec = registry.load_experiment(name, "paper")
    for arm in spec.arms:
        if spec.runs_at_tiny_scale_only(arm):
            continue  # refused at paper scale before composing (tests/launch/test_overrides.py)
        assert bf16_weight_sync_problem(_cfg(spec, arm)[1], arm) is None, (name, arm.label)


@pytest.mark.parametrize("override,symbol", [
    ("actor_rollout_ref.model.lora.merge=true", "FSDPEngine._merged_lora_per_tensor_param"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend=delta_sharded", "FSDPEngine.get_per_tensor_param_shard"),
])
def test_an_fp16_arm_that_would_sync_through_bf16_is_refused_and_a_bf16_arm_is_not(override, symbol, tmp_path,
                                                                                     monkeypatch):
    monkeypatch.setenv("PRECISION_RL_RUNS", str(tmp_path))
    spec = registry.load_experiment("lora/grpo_token_tis", "paper")
    fp16, bf16 = spec.arm("fp16"), spec.arm("bf16")
    plan, cfg = _cfg(spec, fp16, override)
    problem = bf16_weight_sync_problem(cfg, fp16)
    assert symbol in problem and "the fp16 arm's fp16 rollout would run on BF16 weights" in problem
    with pytest.raises(UserError, match=f"lora.grpo_token_tis-fp16-s42: .*{symbol}"):
        runner.check_composes(plan)
    assert bf16_weight_sync_problem(_cfg(spec, bf16, override)[1], bf16) is None


@pytest.mark.parametrize("path,value,symbol", BF16_WEIGHT_SYNCS)
def test_the_guarded_verl_paths_still_round_to_bf16(path, value, symbol):
    """The guard names verl 0.9.1's code: if a verl release stops casting there, this fails and the guard goes."""
    module, cls, method = symbol.rsplit(".", 2)
    source = inspect.getsource(getattr(getattr(import_module(module), cls), method))
    assert "torch.bfloat16" in source


def test_another_verl_is_refused_in_one_line(monkeypatch):
    assert verl_version.verl_version_problem() is None
    monkeypatch.setattr(verl_version, "version", lambda name: "0.9.2")
    assert verl_version.verl_version_problem() == (
        "precision_rl's verl extensions are written against verl 0.9.1, found verl 0.9.2: install the locked one "
        "(requirements/verl.lock on a CPU, requirements/gpu.lock on GPU nodes)")


def test_the_extensions_refuse_to_load_under_another_verl(monkeypatch):
    from precision_rl.verl_ext import plugin

    monkeypatch.setattr(plugin, "verl_version_problem", lambda: "found verl 0.9.2")
    with pytest.raises(ImportError, match="found verl 0.9.2"):
        plugin.install()
