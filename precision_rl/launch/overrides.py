"""Experiment spec → verl 0.9.1 Hydra overrides and the ``python -m verl.trainer.main_ppo`` command.

Precision keys come from ``precision.verl_precision_overrides`` and algorithm keys from
``algorithms.verl_algorithm_overrides``; everything else an experiment sets is rendered here, from the
``HYPER_KEYS`` table. ``compose`` runs verl's own Hydra composition and config dataclasses on the result, so a
wrong key fails on CPU, long before a GPU job would.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precision_rl.config.algorithms import AlgorithmSettings, verl_algorithm_overrides
from precision_rl.config.precision import PrecisionArm, rollout_quantization_overrides, verl_precision_overrides
from precision_rl.config.registry import ExperimentSpec, Hyper
from precision_rl.config.scale import PAPER
from precision_rl.errors import UserError
from precision_rl.logit_noise import LogitNoise
from precision_rl.paths import PACKAGE_DIR
from precision_rl.reward.templates import get_template
from precision_rl.verl_ext.rollout import STOP_KEY
from precision_rl.verl_ext.settings import ACTOR, LOGIT_NOISE_PROCESSOR, REF, ROLLOUT, SAVE_FREQ_KEY

PROJECT_NAME = "precision-rl"
# verl loads this file by path in its reward workers; its name is what verl's custom reward hook calls.
REWARD_FILE = PACKAGE_DIR / "verl_ext" / "score.py"
REWARD_FUNCTION = "compute_score"
# verl's main_ppo with the project's extensions loaded (precision_rl/verl_ext/main.py).
ENTRYPOINT = ("-m", "precision_rl.verl_ext.main")
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"

# Hyper fields rendered one-to-one (both backends). Fields missing here are rendered by name below
# (betas/eps, validation sampling, parallelism) or belong to the algorithm module (is_threshold, DAPO's
# generation batch and filter).
HYPER_KEYS = {
    "train_batch_size": "data.train_batch_size",
    "max_prompt_length": "data.max_prompt_length",
    "max_response_length": "data.max_response_length",
    "filter_overlong_prompts": "data.filter_overlong_prompts",
    "ppo_mini_batch_size": f"{ACTOR}.ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu": f"{ACTOR}.ppo_micro_batch_size_per_gpu",
    "use_dynamic_bsz": f"{ACTOR}.use_dynamic_bsz",
    "ppo_max_token_len_per_gpu": f"{ACTOR}.ppo_max_token_len_per_gpu",
    "ppo_epochs": f"{ACTOR}.ppo_epochs",
    "lr": f"{ACTOR}.optim.lr",
    "lr_warmup_steps": f"{ACTOR}.optim.lr_warmup_steps",
    "weight_decay": f"{ACTOR}.optim.weight_decay",
    "clip_ratio_low": f"{ACTOR}.clip_ratio_low",
    "clip_ratio_high": f"{ACTOR}.clip_ratio_high",
    "clip_ratio_c": f"{ACTOR}.clip_ratio_c",
    "loss_agg_mode": f"{ACTOR}.loss_agg_mode",
    "loss_scale_factor": f"{ACTOR}.loss_scale_factor",
    "entropy_coeff": f"{ACTOR}.entropy_coeff",
    "norm_adv_by_std": "algorithm.norm_adv_by_std_in_grpo",
    "rollout_n": f"{ROLLOUT}.n",
    "temperature": f"{ROLLOUT}.temperature",
    "top_p": f"{ROLLOUT}.top_p",
    "val_top_p": f"{ROLLOUT}.val_kwargs.top_p",
    "val_n": f"{ROLLOUT}.val_kwargs.n",
    "rollout_tensor_parallel": f"{ROLLOUT}.tensor_model_parallel_size",
    "gpu_memory_utilization": f"{ROLLOUT}.gpu_memory_utilization",
    "total_training_steps": "trainer.total_training_steps",
    "total_epochs": "trainer.total_epochs",
    "test_freq": "trainer.test_freq",
    "save_freq": SAVE_FREQ_KEY,
    "max_checkpoints": "trainer.max_actor_ckpt_to_keep",
    "val_before_train": "trainer.val_before_train",
    "val_only": "trainer.val_only",
}
MEGATRON_PARALLEL_KEYS = {
    "megatron_tensor_parallel": "tensor_model_parallel_size",
    "megatron_pipeline_parallel": "pipeline_model_parallel_size",
    "megatron_expert_parallel": "expert_model_parallel_size",
}
ALGORITHM_FIELDS = {f.name for f in dataclasses.fields(AlgorithmSettings)}
VERL_DEFAULT_LR = 1e-6  # actor_rollout_ref.actor.optim.lr in verl 0.9.1's ppo_trainer and ppo_megatron_trainer


@dataclass(frozen=True)
class RunContext:
    """Where one run's files go and how it is identified; everything rendering needs beyond the spec."""

    run_name: str
    seed: int
    data_dir: Path
    metrics_path: Path
    checkpoint_dir: Path
    gpus_per_node: int
    nnodes: int
    loggers: tuple[str, ...] = ("console", "file")
    model_path: str | None = None  # where the model is read from; None: the spec's model id


def hydra_value(value: Any) -> str:
    """Return ``value`` written as a Hydra override value (booleans lower-case, floats round-trippable)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return str(value)


def _quoted_list(items: list[str]) -> str:
    return "[" + ",".join(f'"{item}"' for item in items) + "]"


def config_name(spec: ExperimentSpec) -> str:
    """Return the verl Hydra config that ``spec``'s backend composes on."""
    return "ppo_megatron_trainer" if spec.backend == "megatron" else "ppo_trainer"


def data_files(spec: ExperimentSpec, data_dir: Path) -> tuple[Path, list[Path]]:
    """Return the absolute training parquet and validation parquets of ``spec`` under ``data_dir``."""
    from precision_rl.data.recipes import dataset_file

    root = Path(data_dir).resolve()
    return (dataset_file(root, spec.data.train, "train", spec.template),
            [dataset_file(root, name, "test", spec.template) for name in spec.data.val])


def _optimizer_overrides(spec: ExperimentSpec) -> list[str]:
    h = spec.hyper
    out = []
    if spec.backend == "fsdp":
        if h.betas is not None:
            out.append(f"{ACTOR}.optim.betas={hydra_value(list(h.betas))}")
        if h.eps is not None:
            out.append(f"+{ACTOR}.optim.override_optimizer_config.eps={h.eps!r}")
        if h.lr_scheduler_type is not None:
            out.append(f"{ACTOR}.optim.lr_scheduler_type={h.lr_scheduler_type}")
        if h.min_lr_ratio is not None:
            out.append(f"{ACTOR}.optim.min_lr_ratio={h.min_lr_ratio!r}")
        return out
    # Megatron's scheduler names the same schedule lr_decay_style, with an absolute floor min_lr.
    if h.lr_scheduler_type is not None:
        out.append(f"{ACTOR}.optim.lr_decay_style={h.lr_scheduler_type}")
    if h.min_lr_ratio is not None:
        out.append(f"{ACTOR}.optim.min_lr={(h.lr if h.lr is not None else VERL_DEFAULT_LR) * h.min_lr_ratio!r}")
    # verl 0.9.1's init_megatron_optim_config ignores optim.betas: Megatron's own names go through the override.
    if h.betas is not None:
        out += [f"+{ACTOR}.optim.override_optimizer_config.adam_beta1={h.betas[0]!r}",
                f"+{ACTOR}.optim.override_optimizer_config.adam_beta2={h.betas[1]!r}"]
    if h.eps is not None:
        out.append(f"+{ACTOR}.optim.override_optimizer_config.adam_eps={h.eps!r}")
    return out


def _hyper_overrides(spec: ExperimentSpec) -> list[str]:
    h = spec.hyper
    out = [f"{key}={hydra_value(getattr(h, name))}" for name, key in HYPER_KEYS.items() if getattr(h, name) is not None]
    if h.ppo_micro_batch_size_per_gpu is not None:
        for role in (ROLLOUT, REF):
            out.append(f"{role}.log_prob_micro_batch_size_per_gpu={h.ppo_micro_batch_size_per_gpu}")
    if h.val_temperature is not None:
        out += [f"{ROLLOUT}.val_kwargs.temperature={h.val_temperature!r}",
                f"{ROLLOUT}.val_kwargs.do_sample={hydra_value(h.val_temperature > 0)}"]
    if spec.backend == "megatron":
        for name, key in MEGATRON_PARALLEL_KEYS.items():
            if getattr(h, name) is not None:
                out.append(f"{ACTOR}.megatron.{key}={getattr(h, name)}")
    return out + _optimizer_overrides(spec)


def _template_overrides(spec: ExperimentSpec) -> list[str]:
    """Return the prompt rendering and stop strings of the spec's template (none for templates that use neither)."""
    template = get_template(spec.template)
    out = []
    if template.chat_template is not None:
        out.append(f"++actor_rollout_ref.model.custom_chat_template={_quoted(template.chat_template)}")
    if template.stop:
        # read by the rollout extension (precision_rl/verl_ext/rollout.py)
        out.append(f"++{ROLLOUT}.custom.{STOP_KEY}={_quoted_list(list(template.stop))}")
    return out


def _quoted(text: str) -> str:
    if '"' in text:
        raise UserError(f"cannot pass a value with a double quote to Hydra: {text!r}")
    return f'"{text}"'


def logit_noise(spec: ExperimentSpec, seed: int) -> LogitNoise | None:
    """Return the synthetic logit noise a run of ``spec`` with ``seed`` carries, or None; a UserError at paper scale
    or for a control without noise."""
    h = spec.hyper
    if h.logit_noise_in_trainer and not h.rollout_logit_noise:
        raise UserError(f"{spec.name}: logit_noise_in_trainer is the control of a noised rollout and needs "
                        "rollout_logit_noise > 0")
    if not h.rollout_logit_noise:
        return None
    if h.logit_noise_in_trainer and spec.backend != "fsdp":
        raise UserError(f"{spec.name}: only the FSDP engine adds the control's logit noise "
                        "(precision_rl.verl_ext.engine); use backend fsdp")
    if spec.scale == PAPER:
        raise UserError(f"{spec.name}: {spec.noise_refusal()}")
    return LogitNoise(h.rollout_logit_noise, seed, bool(h.logit_noise_in_trainer))


def _logit_noise_overrides(spec: ExperimentSpec, seed: int) -> list[str]:
    """Return the overrides that hand the run's logit noise to every process and its processor to vLLM (none
    without noise)."""
    spec_noise = logit_noise(spec, seed)
    if spec_noise is None:
        return []
    # Ray takes only string values in env_vars, and Hydra reads an unquoted 1.0 as a number.
    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={_quoted(value)}" for name, value in spec_noise.env().items()] + [
        f"+{ROLLOUT}.engine_kwargs.vllm.logits_processors={_quoted_list([LOGIT_NOISE_PROCESSOR])}"]


def _seed_overrides(spec: ExperimentSpec, seed: int) -> list[str]:
    engine = "megatron" if spec.backend == "megatron" else "fsdp_config"
    return [f"data.seed={seed}", f"{ACTOR}.data_loader_seed={seed}", f"{ACTOR}.{engine}.seed={seed}",
            f"{REF}.{engine}.seed={seed}", f"{ROLLOUT}.seed={seed}"]


def algorithm_settings(hyper: Hyper) -> AlgorithmSettings:
    """Return the part of ``hyper`` that the algorithm mapping reads."""
    return AlgorithmSettings(**{name: getattr(hyper, name) for name in ALGORITHM_FIELDS})


def _lora_alpha(alpha: float) -> str:
    if not float(alpha).is_integer():
        raise UserError(f"verl 0.9.1 takes an integer LoRA alpha (verl.workers.config.model.HFModelConfig), got {alpha}")
    return str(int(alpha))


def verl_overrides(spec: ExperimentSpec, arm: PrecisionArm, ctx: RunContext) -> list[str]:
    """Return the complete list of verl 0.9.1 Hydra overrides for one run of ``spec`` in ``arm``."""
    train, val = data_files(spec, ctx.data_dir)
    out = [
        f"data.train_files={train}",
        f"data.val_files={_quoted_list([str(p) for p in val])}",
        f"actor_rollout_ref.model.path={ctx.model_path or spec.model}",
        f"{ROLLOUT}.name=vllm",
        f"{ROLLOUT}.calculate_log_probs=true",
        f"reward.custom_reward_function.path={REWARD_FILE}",
        f"reward.custom_reward_function.name={REWARD_FUNCTION}",
        f"+reward.custom_reward_function.reward_kwargs.template={spec.template}",
        f"+reward.custom_reward_function.reward_kwargs.grader={spec.grader}",
    ]
    out += _template_overrides(spec)
    out += verl_algorithm_overrides(spec.algorithm, algorithm_settings(spec.hyper))
    out += verl_precision_overrides(arm, spec.backend)
    out += rollout_quantization_overrides(arm, spec.scale)
    out += _hyper_overrides(spec)
    if spec.lora is not None:
        out += [f"actor_rollout_ref.model.lora_rank={spec.lora.rank}",
                # verl's HFModelConfig types lora_alpha as an int (verl.workers.config.model.HFModelConfig).
                f"actor_rollout_ref.model.lora_alpha={_lora_alpha(spec.lora.alpha)}",
                f"actor_rollout_ref.model.target_modules={spec.lora.targets}"]
    out += _seed_overrides(spec, ctx.seed)
    out += _logit_noise_overrides(spec, ctx.seed)
    out += [
        f"trainer.project_name={PROJECT_NAME}",
        f"trainer.experiment_name={ctx.run_name}",
        f"trainer.logger={_quoted_list(list(ctx.loggers))}",
        f"trainer.n_gpus_per_node={ctx.gpus_per_node}",
        f"trainer.nnodes={ctx.nnodes}",
        f"trainer.default_local_dir={ctx.checkpoint_dir}",
        # The file logger runs inside a Ray actor: the path must be absolute and reach it through Ray's env.
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{FILE_LOGGER_ENV}={ctx.metrics_path}",
    ]
    return out


def verl_command(spec: ExperimentSpec, overrides: list[str], python: str = "python") -> list[str]:
    """Return the argv that launches verl's trainer with ``overrides``."""
    argv = [python, *ENTRYPOINT]
    if spec.backend == "megatron":
        argv.append(f"--config-name={config_name(spec)}")
    return argv + list(overrides)


def shell_command(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Return ``argv`` (with leading ``env`` assignments) as one copy-pasteable shell line."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join(prefix + [shlex.quote(a) for a in argv])


def verl_config_dir() -> Path:
    """Return verl's installed Hydra config directory."""
    import verl

    return Path(verl.__file__).resolve().parent / "trainer" / "config"


def compose(name: str, overrides: list[str]):
    """Return verl's composed OmegaConf config for ``overrides`` on config ``name`` (raises on a bad key)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return hydra_compose(config_name=name, overrides=list(overrides))


def to_dataclasses(cfg) -> dict[str, Any]:
    """Return the actor, ref, rollout and algorithm sections of ``cfg`` as verl's own config dataclasses."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils.config import omega_conf_to_dataclass

    out = {
        "actor": omega_conf_to_dataclass(cfg.actor_rollout_ref.actor),
        "rollout": omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout),
        "algorithm": omega_conf_to_dataclass(cfg.algorithm),
    }
    out["rollout_correction"] = RolloutCorrectionConfig(**dict(out["algorithm"].rollout_correction))
    out["model"] = _typed_model_config(cfg.actor_rollout_ref.model)
    return out


def _typed_model_config(model_cfg):
    """Return the model section checked against the types of verl's ``HFModelConfig``.

    Instantiating ``HFModelConfig`` would load the model's config from its path (an HF hub id at paper scale), so
    the section is merged into the dataclass's typed schema instead, which checks every field's type.
    """
    from omegaconf import OmegaConf
    from verl.workers.config.model import HFModelConfig

    values = OmegaConf.to_container(model_cfg, resolve=True)
    values.pop("_target_", None)
    return OmegaConf.merge(OmegaConf.structured(HFModelConfig), values)
