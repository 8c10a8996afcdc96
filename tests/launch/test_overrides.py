"""The proof: every experiment × precision arm composes on verl 0.9.1's own Hydra config, instantiates verl's config
dataclasses, and its precision, algorithm and optimizer settings land where verl reads them."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from precision_rl import logit_noise as logit_noise_module
from precision_rl import paths
from precision_rl.config import registry
from precision_rl.config.algorithms import UNCAPPED
from precision_rl.config.precision import VERL_QUANTIZATION, PrecisionArm
from precision_rl.config.scale import ScaleDecision
from precision_rl.errors import UserError
from precision_rl.launch import runner
from precision_rl.launch.overrides import (
    RunContext,
    compose,
    config_name,
    to_dataclasses,
    verl_overrides,
)
from precision_rl.reward.templates import RAW_CHAT_TEMPLATE, get_template
from precision_rl.verl_ext.rollout import stop_strings
from precision_rl.verl_ext.settings import LOGIT_NOISE_PROCESSOR, ROLLOUT_FORMAT_ENV

SPECS = registry.load_all("paper")
ARMS = [(name, arm.label) for name, spec in SPECS.items() for arm in spec.arms]
TINY = ScaleDecision("tiny", "tiny", "test")
CTX = RunContext(run_name="t-run", seed=7, data_dir=Path("/data"), metrics_path=Path("/runs/r/metrics.jsonl"),
                 checkpoint_dir=Path("/runs/r/checkpoints"), gpus_per_node=8, nnodes=2)


def _build(name: str, label: str, overrides_hook=None):
    spec = SPECS[name]
    arm = spec.arm(label)
    overrides = verl_overrides(spec, arm, CTX)
    if overrides_hook:
        overrides = overrides_hook(overrides)
    cfg = compose(config_name(spec), overrides)
    return spec, arm, cfg, to_dataclasses(cfg)


def _to_dtype(text: str) -> torch.dtype:
    from verl.utils.torch_dtypes import PrecisionType

    return PrecisionType.to_dtype(text)


def assert_precision_landed(spec, arm: PrecisionArm, cfg, dc) -> None:
    """Check the arm's dtypes where verl 0.9.1 reads them (FSDP engine, Megatron engine, vLLM rollout)."""
    assert dc["rollout"].dtype == arm.vllm_dtype
    assert getattr(torch, dc["rollout"].dtype) == arm.infer_dtype
    fmt = arm.rollout_quantization
    if spec.scale == "paper":
        assert dc["rollout"].quantization == (VERL_QUANTIZATION[fmt.name] if fmt else None)
    else:
        env = cfg.ray_kwargs.ray_init.get("runtime_env", {}).get("env_vars", {})
        assert env.get(ROLLOUT_FORMAT_ENV) == (fmt.name if fmt else None) and dc["rollout"].quantization is None
    if spec.backend == "fsdp":
        for role in ("actor", "ref"):
            mp = cfg.actor_rollout_ref[role].fsdp_config.get("mixed_precision")
            assert mp is not None, f"{role} has no mixed_precision"
            # FSDPEngine._build_fsdp_module reads mixed_precision.get("param_dtype", "bf16") etc.
            assert _to_dtype(mp.get("param_dtype", "bf16")) == arm.train_dtype
            assert _to_dtype(mp.get("reduce_dtype", "fp32")) == torch.float32
            assert _to_dtype(mp.get("buffer_dtype", "fp32")) == torch.float32
        assert _to_dtype(dc["actor"].fsdp_config.mixed_precision["param_dtype"]) == arm.train_dtype
        if arm.train == "fp32":
            assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
            assert cfg.actor_rollout_ref.model.use_remove_padding is False
    else:
        assert dc["actor"].megatron.dtype == {"fp16": "float16", "bf16": "bfloat16"}[arm.train]
        assert cfg.actor_rollout_ref.ref.megatron.dtype == dc["actor"].megatron.dtype


def assert_algorithm_landed(spec, cfg, dc) -> None:
    """Check the algorithm's loss mode, advantage estimator and rollout-correction settings."""
    actor, corr, algo = dc["actor"], dc["rollout_correction"], dc["algorithm"]
    assert algo.adv_estimator == "grpo"
    h = spec.hyper
    bypass = spec.algorithm.startswith("pg_")
    assert actor.policy_loss.loss_mode == {"gspo": "gspo"}.get(spec.algorithm, "bypass_mode" if bypass else "vanilla")
    assert corr.bypass_mode is bypass
    expected_is = {"grpo_token_tis": "token", "grpo_seq_mis": "sequence"}.get(spec.algorithm)
    if bypass:
        expected_is = "sequence"
        assert corr.loss_type == "reinforce"
        actor_corr = actor.policy_loss.rollout_correction
        assert actor_corr["loss_type"] == "reinforce" and actor_corr["bypass_mode"] is True
        assert actor_corr["rollout_is"] == "sequence"
    assert corr.rollout_is == expected_is
    cap = UNCAPPED if spec.algorithm == "pg_seq_is" else h.is_threshold
    if expected_is is not None:
        assert float(corr.rollout_is_threshold) == pytest.approx(cap)
    if spec.algorithm in ("grpo_seq_mis", "pg_seq_mis"):
        assert corr.rollout_rs == "seq_sum_k1"
        lower, upper = (float(x) for x in str(corr.rollout_rs_threshold).split("_"))
        assert upper == math.inf and 1 / lower == pytest.approx(cap)
    else:
        assert corr.rollout_rs is None
    if spec.algorithm == "dapo":
        assert cfg.algorithm.filter_groups.enable is True
        assert cfg.reward.reward_kwargs.overlong_buffer_cfg.len == h.overlong_buffer_len
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True


def assert_logit_noise_landed(spec, cfg, seed: int) -> None:
    """Check that a synthetic rung hands its noise to every process and its processor to vLLM, and no other run
    does."""
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    processors = cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.get("logits_processors")
    if not spec.hyper.rollout_logit_noise:
        assert logit_noise_module.SIGMA_ENV not in env and processors is None
        return
    assert all(isinstance(env[name], str) for name in logit_noise_module.LogitNoise(1, 0).env())  # Ray takes strings only
    carried = logit_noise_module.noise_from_env(dict(env))
    assert carried == logit_noise_module.LogitNoise(spec.hyper.rollout_logit_noise, seed,
                                                    bool(spec.hyper.logit_noise_in_trainer))
    assert list(processors) == [LOGIT_NOISE_PROCESSOR]


def assert_hyper_landed(spec, cfg, dc, seed: int = CTX.seed, metrics_path: Path = CTX.metrics_path) -> None:
    """Check the optimizer, loss and batch settings, building verl's own optimizer where it can run on CPU."""
    h, actor = spec.hyper, dc["actor"]
    if h.loss_agg_mode:
        assert actor.loss_agg_mode == h.loss_agg_mode
    if h.loss_scale_factor:
        assert actor.loss_scale_factor == h.loss_scale_factor
    if h.norm_adv_by_std is not None:
        assert dc["algorithm"].norm_adv_by_std_in_grpo is h.norm_adv_by_std
    for field in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "ppo_mini_batch_size"):
        if getattr(h, field) is not None:
            assert getattr(actor, field) == pytest.approx(getattr(h, field))
    if h.train_batch_size:
        assert cfg.data.train_batch_size == h.train_batch_size
    assert cfg.data.seed == seed and dc["rollout"].seed == seed
    assert cfg.trainer.logger == ["console", "file"]
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == str(metrics_path)
    if spec.backend == "fsdp":
        from verl.workers.config.optimizer import build_optimizer

        opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], actor.optim)
        group = opt.param_groups[0]
        assert group["lr"] == pytest.approx(h.lr if h.lr is not None else 1e-6)
        if h.betas:
            assert tuple(group["betas"]) == pytest.approx(h.betas)
        if h.eps:
            assert group["eps"] == pytest.approx(h.eps)
        if h.weight_decay is not None:
            assert group["weight_decay"] == pytest.approx(h.weight_decay)
    else:
        over = actor.optim.override_optimizer_config
        if h.betas:
            assert (over["adam_beta1"], over["adam_beta2"]) == pytest.approx(h.betas)
        if h.eps:
            assert over["adam_eps"] == pytest.approx(h.eps)
    assert_schedule_landed(spec, dc["actor"].optim)
    assert_sampling_landed(spec, cfg)
    assert_logit_noise_landed(spec, cfg, seed)
    if spec.lora:
        assert cfg.actor_rollout_ref.model.lora_rank == spec.lora.rank
        assert cfg.actor_rollout_ref.model.lora_alpha == spec.lora.alpha


def assert_sampling_landed(spec, cfg) -> None:
    """Check the evaluation sampling, the prompt rendering and the stop strings where verl and the rollout
    extension read them."""
    rollout, h = cfg.actor_rollout_ref.rollout, spec.hyper
    if h.val_temperature is not None:
        assert rollout.val_kwargs.temperature == h.val_temperature
        assert rollout.val_kwargs.do_sample is (h.val_temperature > 0)
    if h.val_top_p is not None:
        assert rollout.val_kwargs.top_p == h.val_top_p
    if h.val_n is not None:
        assert rollout.val_kwargs.n == h.val_n
    template = get_template(spec.template)
    assert cfg.actor_rollout_ref.model.custom_chat_template == template.chat_template
    assert stop_strings(rollout.get("custom")) == list(template.stop)


def assert_schedule_landed(spec, optim) -> None:
    """Check the LR schedule where each engine reads it (FSDP: lr_scheduler_type/min_lr_ratio; Megatron:
    lr_decay_style/min_lr), verl's constant schedule standing when the experiment names none."""
    h = spec.hyper
    lr = h.lr if h.lr is not None else 1e-6
    if spec.backend == "fsdp":
        assert optim.lr_scheduler_type == (h.lr_scheduler_type or "constant")
        assert (optim.min_lr_ratio or 0.0) == pytest.approx(h.min_lr_ratio or 0.0)
    else:
        assert optim.lr_decay_style == (h.lr_scheduler_type or "constant")
        assert optim.min_lr == pytest.approx(lr * (h.min_lr_ratio or 0.0))


@pytest.mark.parametrize("name", ["sanity/grpo", "dense14b/dapo"])
def test_a_cosine_schedule_lands_on_either_backend(name):
    import dataclasses

    spec = SPECS[name]
    spec = dataclasses.replace(spec, hyper=dataclasses.replace(spec.hyper, lr_scheduler_type="cosine", min_lr_ratio=0.1))
    dc = to_dataclasses(compose(config_name(spec), verl_overrides(spec, spec.arms[0], CTX)))
    assert_schedule_landed(spec, dc["actor"].optim)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(registry.load_all("tiny")))
def test_every_tiny_profile_composes_lands_and_fits_its_gpus(name, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    spec = registry.load_experiment(name, "tiny")
    for arm in spec.arms:
        plan = runner.plan_run(spec, arm, TINY, runner.RunOptions())
        cfg, dc = runner.check_composes(plan)
        assert_precision_landed(spec, arm, cfg, dc)
        assert_hyper_landed(spec, cfg, dc, plan.options.seed, plan.metrics_path)


@pytest.mark.parametrize("name,label", ARMS, ids=[f"{n}-{a}" for n, a in ARMS])
def test_every_arm_composes_and_lands(name, label):
    if SPECS[name].runs_at_tiny_scale_only(SPECS[name].arm(label)):
        with pytest.raises(UserError, match="runs at tiny scale only"):
            _build(name, label)
        return
    spec, arm, cfg, dc = _build(name, label)
    assert_precision_landed(spec, arm, cfg, dc)
    assert_algorithm_landed(spec, cfg, dc)
    assert_hyper_landed(spec, cfg, dc)


def test_the_grid_covers_every_arm():
    assert len(ARMS) == sum(len(s.arms) for s in SPECS.values()) >= 37


def test_a_misspelled_precision_key_fails_the_proof():
    def misspell(overrides):
        return [o.replace("mixed_precision.param_dtype", "mixed_precision.param_dtyp") for o in overrides]

    spec, arm, cfg, dc = _build("sanity/grpo", "fp16", misspell)
    with pytest.raises(AssertionError):
        assert_precision_landed(spec, arm, cfg, dc)


def test_the_legacy_dtype_key_is_rejected_by_verl():
    # PR #4036's actor.dtype no longer exists in 0.9.1 (docs/verl.md#precision-keys): composition itself must fail.
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="actor_rollout_ref.actor.dtype"):
        _build("sanity/grpo", "fp16", lambda o: o + ["actor_rollout_ref.actor.dtype=float16"])


@pytest.mark.parametrize("name", ["sanity/grpo_seq_mis", "sanity/pg_seq_mis"])
def test_seq_mis_bound_masks_exactly_ratios_above_cap(name):
    """Run verl's own rejection sampler with the composed threshold: ρ ≤ C is kept however small ρ is (down to the
    smallest sum of clamped token log-ratios verl can form), ρ > C is masked."""
    from verl.trainer.ppo.rollout_corr_helper import SAFETY_BOUND, compute_rollout_correction_and_rejection_mask

    _, _, _, dc = _build(name, "bf16")
    corr = dc["rollout_correction"]
    cap = SPECS[name].hyper.is_threshold
    length = 64
    seq_log_ratios = [-2 * SAFETY_BOUND * length, math.log(1e-7), math.log(0.05), 0.0, math.log(cap * 0.9),
                      math.log(cap * 1.1), math.log(cap * 5)]
    old = torch.tensor(seq_log_ratios).unsqueeze(1).expand(-1, length) / length
    rollout = torch.zeros_like(old)
    _, mask, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=rollout, response_mask=torch.ones_like(old),
        rollout_is=corr.rollout_is, rollout_is_threshold=corr.rollout_is_threshold,
        rollout_rs=corr.rollout_rs, rollout_rs_threshold=corr.rollout_rs_threshold)
    assert mask[:, 0].tolist() == [1, 1, 1, 1, 1, 0, 0]


def test_hydra_would_misread_an_unquoted_bound():
    # The pitfall the quoting avoids: Hydra reads 0.5_100 as the number 0.51.
    cfg = compose("ppo_trainer", ["algorithm.rollout_correction.rollout_rs_threshold=0.5_100"])
    assert not isinstance(cfg.algorithm.rollout_correction.rollout_rs_threshold, str)
    assert math.isclose(cfg.algorithm.rollout_correction.rollout_rs_threshold, 0.51)


def test_octothinker_renders_the_raw_prompt_the_answer_stop_and_sampled_evaluation():
    spec, arm, cfg, dc = _build("octothinker/grpo", "bf16")
    overrides = verl_overrides(spec, arm, CTX)
    assert '++actor_rollout_ref.rollout.custom.stop=["</answer>"]' in overrides
    assert cfg.actor_rollout_ref.model.custom_chat_template == RAW_CHAT_TEMPLATE
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    assert (val.temperature, val.top_p, val.n, val.do_sample) == (0.6, 0.95, 1, True)
    assert dc["actor"].clip_ratio_c >= 1e9


def test_pg_seq_is_cap_lies_above_every_weight_verl_can_produce():
    """verl 0.9.1 clamps the sequence log-ratio at ±SAFETY_BOUND before exp: the "uncapped" cap must lie above."""
    from verl.trainer.ppo.rollout_corr_helper import SAFETY_BOUND, compute_rollout_correction_weights

    _, _, _, dc = _build("sanity/pg_seq_is", "bf16")
    cap = float(dc["rollout_correction"].rollout_is_threshold)
    assert cap > math.exp(SAFETY_BOUND)
    old = torch.full((1, 4), 10.0)  # Σ log ρ = 40, clamped to SAFETY_BOUND
    weights, _ = compute_rollout_correction_weights(log_ratio=old, response_mask=torch.ones_like(old),
                                                    rollout_is="sequence", rollout_is_threshold=cap)
    assert float(weights.max()) == pytest.approx(math.exp(SAFETY_BOUND), rel=1e-4)


def test_the_grader_reaches_verls_reward_function():
    for name, grader in (("sanity/grpo", "oat"), ("sanity/grpo_fork_grader", "fork")):
        _, _, cfg, _ = _build(name, "fp16")
        assert cfg.reward.custom_reward_function.reward_kwargs.grader == grader


def test_lora_evaluates_by_sampling_with_the_scripts_rank():
    spec, _, cfg, _ = _build("lora/grpo_token_tis", "fp16")
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    assert (val.temperature, val.top_p, val.n, val.do_sample) == (0.6, 0.95, 1, True)
    assert (cfg.actor_rollout_ref.model.lora_rank, cfg.actor_rollout_ref.model.lora_alpha) == (1, 2)


def test_the_raw_chat_template_gives_the_template_text_after_bos(tiny_random_model):
    """verl renders a prompt with the model's tokenizer; with the raw template it is oat's text, BOS first."""
    from transformers import AutoTokenizer

    from precision_rl.reward.templates import chat_prompt, get_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_random_model)
    tokenizer.chat_template = RAW_CHAT_TEMPLATE
    question = "What is 2 + 3?"
    raw = get_template("r1").raw(question)
    messages = chat_prompt(question, "r1")
    tokenizer.bos_token = None
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == raw
    tokenizer.bos_token = "<|endoftext|>"
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == "<|endoftext|>" + raw


@pytest.mark.parametrize("c,dual_clip", [(3.0, True), (1e10, False)])
def test_a_huge_clip_ratio_c_turns_verls_dual_clip_off(c, dual_clip):
    """oat's PPO loss has no dual clip; verl's vanilla loss caps −A·r at −A·c for A < 0 unless c never binds."""
    from types import SimpleNamespace

    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    config = SimpleNamespace(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, global_batch_info={},
                             get=lambda key, default=None: c if key == "clip_ratio_c" else default)
    log_ratio = torch.tensor([[0.0, 2.0, 19.0, 25.0]])  # up to and past verl's clamp at 20
    advantages = -torch.ones_like(log_ratio)
    loss, _ = compute_policy_loss_vanilla(torch.zeros_like(log_ratio), log_ratio, advantages,
                                          torch.ones_like(log_ratio), loss_agg_mode="token-sum", config=config)
    ratio = torch.exp(log_ratio.clamp(max=20.0))
    plain_ppo = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2)).sum()
    assert torch.isclose(loss, plain_ppo, rtol=1e-6).item() is not dual_clip


def test_dapo_generation_batch_becomes_v1_in_flight_batches():
    spec, _, cfg, _ = _build("dense14b/dapo", "bf16")
    h = spec.hyper
    assert cfg.algorithm.filter_groups.max_inflight_gen_batches == -(-h.gen_batch_size // h.train_batch_size) == 3
    assert cfg.data.get("gen_batch_size") is None  # verl's V1 trainer forces 1 and warns about any other value
    assert cfg.algorithm.filter_groups.max_num_gen_batches == 0  # V1 ignores it: not rendered


def test_dapo_refuses_a_batch_size_that_is_not_positive():
    from precision_rl.config.algorithms import AlgorithmSettings, verl_algorithm_overrides
    from precision_rl.errors import UserError

    settings = AlgorithmSettings(filter_groups_metric="acc", gen_batch_size=12, train_batch_size=0,
                                 overlong_buffer_len=4, overlong_penalty_factor=1.0, max_response_length=16)
    with pytest.raises(UserError, match="positive batch sizes"):
        verl_algorithm_overrides("dapo", settings)


@pytest.mark.parametrize("scale", ["paper", "tiny"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_ablations_uniform_cells_are_sanity_grpos_runs(scale, precision):
    """The precision ablation leaves out BF16/BF16 and FP16/FP16 because sanity/grpo renders the same run."""
    specs = registry.load_all(scale)
    ablation, grpo, arm = specs["ablation/precision"], specs["sanity/grpo"], PrecisionArm(precision, precision)
    assert arm not in ablation.arms and arm in grpo.panel_arms("ablation")
    assert verl_overrides(ablation, arm, CTX) == verl_overrides(grpo, arm, CTX)


@pytest.mark.parametrize("name", ["ladder/synthetic_s2", "ladder/synthetic_s2_control"])
def test_a_synthetic_rung_renders_its_noise_at_tiny_scale_and_is_refused_at_paper_scale(name, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    spec = registry.load_experiment(name, "tiny")
    plan = runner.plan_run(spec, spec.arms[0], TINY, runner.RunOptions(seed=7))
    cfg, dc = runner.check_composes(plan)
    assert_logit_noise_landed(spec, cfg, 7)
    recorded = runner.synthetic_noise_record(plan)
    assert recorded["sigma"] == 2.0 and recorded["synthetic"] and recorded["in_trainer"] == name.endswith("control")
    with pytest.raises(UserError, match="the synthetic logit noise runs at tiny scale only"):
        _build(name, "fp16")


def test_a_control_without_noise_is_refused_in_one_line():
    spec = registry.load_experiment("ladder/synthetic_s2_control", "tiny")
    broken = dataclasses.replace(spec, hyper=dataclasses.replace(spec.hyper, rollout_logit_noise=None))
    with pytest.raises(UserError, match="logit_noise_in_trainer is the control of a noised rollout"):
        verl_overrides(broken, broken.arms[0], CTX)


@pytest.mark.parametrize("label", ["fp16", "bf16"])
def test_the_smoke_profile_composes_on_one_gpu_and_is_filed_apart(label, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    spec = registry.load_experiment("sanity/grpo", "paper", profile="smoke")
    arm = spec.arm(label)
    plan = runner.plan_run(spec, arm, ScaleDecision("paper", "paper", "test"), runner.RunOptions(profile="smoke"))
    cfg, dc = runner.check_composes(plan)
    assert_precision_landed(spec, arm, cfg, dc)
    assert_hyper_landed(spec, cfg, dc, plan.options.seed, plan.metrics_path)
    assert (int(cfg.trainer.n_gpus_per_node), int(cfg.trainer.nnodes), int(cfg.trainer.total_training_steps)) == (1, 1, 20)
    assert int(cfg.data.train_batch_size) == 16 and int(cfg.data.max_response_length) == 2048
    whole = registry.load_experiment("sanity/grpo", "paper")
    assert (spec.model, spec.data, spec.algorithm, spec.arms) == (whole.model, whole.data, whole.algorithm, whole.arms)
    assert plan.run_dir.parent.name == f"{label}-smoke" and plan.name == f"sanity.grpo-{label}-smoke-s42"
    assert plan.profile.record() == {"name": "smoke", "stop_after_step": None}


def test_every_sanity_based_experiment_has_the_smoke_profile_and_others_refuse_it():
    have = {name for name in registry.experiment_files()
            if registry.load_raw(registry.experiment_files()[name]).get("profiles", {}).get("smoke")}
    assert {"sanity/grpo", "sanity/gspo", "ablation/precision", "ladder/grpo"} <= have
    for name in sorted(have):
        assert registry.load_experiment(name, "paper", profile="smoke").resources.gpus_per_node == 1
    with pytest.raises(UserError, match="moe/grpo_token_tis has no smoke profile"):
        registry.load_experiment("moe/grpo_token_tis", "paper", profile="smoke")
    with pytest.raises(UserError, match="no smoke profile at tiny scale"):
        registry.load_experiment("sanity/grpo", "tiny", profile="smoke")
