"""One RL step at tiny scale, with verl's own math: vLLM samples (μ) → grader → HF recompute (π_old) →
``core_algos`` advantages → ``rollout_corr_helper`` correction → ``core_algos`` policy loss → (scaled) update →
weights synced into the running vLLM engine. Metrics carry verl's names.

The settings come from composing the experiment's verl overrides (the ones the paper scale launches) on verl's
own Hydra config, so both scales read the same values from the same keys.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from precision_rl.precision import PrecisionArm
from precision_rl.registry import ExperimentSpec
from precision_rl.tiny import metrics as M
from precision_rl.tiny.actor import LoraSettings, TinyActor, make_batch, select
from precision_rl.tiny.rollout import Sample, VLLMRollout
from precision_rl.verl_overrides import RunContext, compose, config_name, to_dataclasses, verl_overrides


@dataclass(frozen=True)
class TinySettings:
    """What the tiny trainer reads from the composed verl config."""

    train_batch_size: int
    rollout_n: int
    mini_batch_prompts: int
    micro_batch: int
    ppo_epochs: int
    max_prompt_length: int
    max_response_length: int
    temperature: float
    top_p: float
    val_n: int
    val_temperature: float
    val_top_p: float
    total_steps: int
    test_freq: int
    val_before_train: bool
    norm_adv_by_std: bool
    loss_mode: str
    loss_agg_mode: str
    bypass: bool
    rollout_is: str | None
    rollout_is_threshold: float | str | None
    rollout_rs: str | None
    rollout_rs_threshold: float | str | None
    grad_clip: float
    gen_batch_size: int
    filter_groups_metric: str | None = None
    overlong_buffer_len: int | None = None
    overlong_penalty_factor: float = 1.0
    lora: LoraSettings | None = None


def tiny_overrides(spec: ExperimentSpec, arm: PrecisionArm, seed: int, extra: list[str] | None = None) -> list[str]:
    """Return the verl overrides a tiny run composes: the experiment's tiny profile rendered exactly as the paper
    scale renders it (paths and names are placeholders: the tiny trainer does not read them), plus ``extra``."""
    ctx = RunContext(run_name="tiny", seed=seed, data_dir=Path("/unused"), metrics_path=Path("/unused/m.jsonl"),
                     checkpoint_dir=Path("/unused/ckpt"), gpus_per_node=1, nnodes=1)
    return verl_overrides(spec, arm, ctx) + list(extra or [])


def verl_settings(spec: ExperimentSpec, arm: PrecisionArm, seed: int, extra: list[str] | None = None):
    """Return (TinySettings, verl actor config dataclass) composed from the experiment's verl overrides
    (plus ``extra`` Hydra overrides, as at paper scale)."""
    cfg = compose(config_name(spec), tiny_overrides(spec, arm, seed, extra))
    dc = to_dataclasses(cfg)
    actor, rollout, corr = dc["actor"], cfg.actor_rollout_ref.rollout, dc["rollout_correction"]
    val = rollout.val_kwargs
    model = cfg.actor_rollout_ref.model
    overlong = (cfg.get("reward", {}).get("reward_kwargs", {}) or {}).get("overlong_buffer_cfg")
    settings = TinySettings(
        train_batch_size=int(cfg.data.train_batch_size), rollout_n=int(rollout.n),
        mini_batch_prompts=int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
        micro_batch=int(cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu or 8),
        ppo_epochs=int(actor.ppo_epochs), max_prompt_length=int(cfg.data.max_prompt_length),
        max_response_length=int(cfg.data.max_response_length), temperature=float(rollout.temperature),
        top_p=float(rollout.top_p), val_n=int(val.n), val_temperature=float(val.temperature) if val.do_sample else 0.0,
        val_top_p=float(val.top_p), total_steps=int(cfg.trainer.total_training_steps),
        test_freq=int(cfg.trainer.test_freq), val_before_train=bool(cfg.trainer.val_before_train),
        norm_adv_by_std=bool(dc["algorithm"].norm_adv_by_std_in_grpo), loss_mode=actor.policy_loss.loss_mode,
        loss_agg_mode=actor.loss_agg_mode, bypass=bool(corr.bypass_mode), rollout_is=corr.rollout_is,
        rollout_is_threshold=corr.rollout_is_threshold, rollout_rs=corr.rollout_rs,
        rollout_rs_threshold=corr.rollout_rs_threshold, grad_clip=float(actor.optim.clip_grad),
        gen_batch_size=int(cfg.data.gen_batch_size or cfg.data.train_batch_size),
        filter_groups_metric=cfg.algorithm.filter_groups.metric if cfg.algorithm.filter_groups.enable else None,
        overlong_buffer_len=int(overlong.len) if overlong and overlong.enable else None,
        overlong_penalty_factor=float(overlong.penalty_factor) if overlong and overlong.enable else 1.0,
        lora=LoraSettings(int(model.lora_rank), float(model.lora_alpha), str(model.target_modules))
        if model.lora_rank else None,
    )
    return settings, actor


@dataclass
class Prompts:
    """A dataset split: prompt token ids, ground truths, and the data source name."""

    ids: list[list[int]]
    ground_truths: list
    data_source: str


class TinyTrainer:
    """The RL loop state: engines, settings, the verl actor config and the grader's template."""

    def __init__(self, settings: TinySettings, actor_cfg, arm: PrecisionArm, model_dir: Path, template: str,
                 seed: int, pad_id: int, rollout: VLLMRollout | None = None):
        """Start the training engine and the vLLM engine (or reuse ``rollout``, loading this trainer's weights)."""
        self.s, self.actor_cfg, self.arm, self.template, self.seed, self.pad_id = (
            settings, actor_cfg, arm, template, seed, pad_id)
        self.actor = TinyActor(model_dir, arm, actor_cfg.optim, settings.grad_clip, settings.lora, settings.total_steps)
        if rollout is not None and rollout.dtype != arm.vllm_dtype:
            raise ValueError(f"a {rollout.dtype} engine cannot serve inference precision {arm.infer}")
        self.rollout = rollout or VLLMRollout(model_dir, arm.vllm_dtype, seed,
                                              max_model_len=settings.max_prompt_length + settings.max_response_length + 8)
        if rollout is not None:
            self.sync()

    # -- pieces of a step -------------------------------------------------------------------------------------
    def _grade(self, samples: list[Sample], ground_truths: list) -> np.ndarray:
        from precision_rl.reward.grader import grade_batch

        results = grade_batch([s.text for s in samples], [ground_truths[s.prompt_index] for s in samples],
                              self.template, [s.truncated for s in samples])
        return np.array([r.score for r in results], dtype=np.float32)

    def _shaped(self, samples: list[Sample], scores: np.ndarray) -> np.ndarray:
        """Return the rewards: the scores plus DAPO's overlong penalty when the experiment enables it."""
        s = self.s
        if s.overlong_buffer_len is None:
            return scores
        expected = s.max_response_length - s.overlong_buffer_len
        exceed = np.array([len(x.response_ids) for x in samples], dtype=np.float32) - expected
        return scores + np.minimum(-exceed / s.overlong_buffer_len * s.overlong_penalty_factor, 0.0)

    def _filter_groups(self, samples: list[Sample], scores: np.ndarray, rewards: np.ndarray):
        """Return samples, scores and rewards of at most train_batch_size groups whose metric varies (DAPO).

        Groups in which every response got the same metric carry no GRPO signal and are dropped; unlike verl,
        the tiny scale does not draw further generation batches to refill the batch.
        """
        s = self.s
        if s.filter_groups_metric is None:
            return samples, scores, rewards
        metric = scores if s.filter_groups_metric == "acc" else rewards
        groups: dict[int, list[int]] = {}
        for i, x in enumerate(samples):
            groups.setdefault(x.prompt_index, []).append(i)
        kept = [g for g in groups.values() if np.std(metric[g]) > 0][: s.train_batch_size]
        if not kept:
            kept = list(groups.values())[:1]
        rows = [i for g in kept for i in g]
        return [samples[i] for i in rows], scores[rows], rewards[rows]

    def _token_rewards(self, scores: np.ndarray, mask: torch.Tensor) -> torch.Tensor:
        rewards = torch.zeros_like(mask)
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        rewards[torch.arange(mask.shape[0]), last] = torch.from_numpy(scores.astype(np.float32)) * (mask.sum(-1) > 0)
        return rewards

    def sync(self) -> None:
        """Load the trainer's current weights into the running vLLM engine."""
        self.rollout.load_weights(self.actor.state_dict_for_sync())

    def step(self, prompts: Prompts, step: int) -> dict[str, float]:
        """Run one RL step on ``prompts`` and return its metrics (verl names)."""
        from verl import DataProto
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
        from verl.utils.debug.metrics import calculate_debug_metrics

        s, t0, timing = self.s, time.perf_counter(), {}
        tick = time.perf_counter()
        samples = self.rollout.generate(prompts.ids, s.rollout_n, s.temperature, s.top_p, s.max_response_length)
        timing["gen"] = time.perf_counter() - tick
        tick = time.perf_counter()
        scores = self._grade(samples, prompts.ground_truths)
        rewards = self._shaped(samples, scores)
        n_generated = len(samples)
        samples, scores, rewards = self._filter_groups(samples, scores, rewards)
        timing["reward"] = time.perf_counter() - tick

        batch = make_batch([x.prompt_ids for x in samples], [x.response_ids for x in samples], self.pad_id)
        mask = batch.response_mask
        rollout_logp = torch.zeros_like(mask)
        for i, x in enumerate(samples):
            rollout_logp[i, : len(x.logprobs)] = torch.tensor(x.logprobs, dtype=torch.float32)

        tick = time.perf_counter()
        old_logp, entropy = self.actor.compute_log_prob(batch, s.micro_batch)
        timing["old_log_prob"] = time.perf_counter() - tick

        tick = time.perf_counter()
        token_rewards = self._token_rewards(rewards, mask)
        uids = np.array([x.prompt_index for x in samples])
        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=token_rewards, response_mask=mask, index=uids, norm_adv_by_std_in_grpo=s.norm_adv_by_std)
        metrics: dict[str, float] = {}
        if s.bypass:
            # verl bypass mode: old_log_prob = μ; the loss computes the IS weight against the current policy itself.
            loss_old, is_weights, loss_mask = rollout_logp, None, mask
            _, _, corr_metrics = compute_rollout_correction_and_rejection_mask(
                old_log_prob=old_logp, rollout_log_prob=rollout_logp, response_mask=mask)
        else:
            weights, loss_mask, corr_metrics = compute_rollout_correction_and_rejection_mask(
                old_log_prob=old_logp, rollout_log_prob=rollout_logp, response_mask=mask, rollout_is=s.rollout_is,
                rollout_is_threshold=s.rollout_is_threshold, rollout_rs=s.rollout_rs,
                rollout_rs_threshold=s.rollout_rs_threshold)
            loss_old, is_weights = old_logp, (weights.batch["rollout_is_weights"] if weights is not None else None)
        metrics.update(corr_metrics)
        debug = DataProto.from_dict(tensors={"rollout_log_probs": rollout_logp, "old_log_probs": old_logp,
                                             "response_mask": mask, "responses": batch.responses})
        metrics.update(calculate_debug_metrics(debug))
        timing["adv"] = time.perf_counter() - tick

        tick = time.perf_counter()
        update = self._update(batch, loss_old, advantages, loss_mask, is_weights)
        timing["update_actor"] = time.perf_counter() - tick
        tick = time.perf_counter()
        self.sync()
        timing["sync"] = time.perf_counter() - tick
        timing["step"] = time.perf_counter() - t0

        metrics.update(update)
        metrics.update(M.step_metrics(scores, mask, old_logp, rollout_logp, entropy, advantages, samples,
                                      s.max_response_length, s.loss_agg_mode))
        metrics.update(M.precision_metrics(self.actor.loss_scale, self.actor.skipped_steps))
        metrics["critic/rewards/mean"] = float(rewards.mean())
        if s.filter_groups_metric is not None:
            metrics["train/num_gen_batches"] = 1
            metrics["train/kept_fraction"] = len(samples) / n_generated
        metrics.update({f"timing_s/{k}": v for k, v in timing.items()})
        n_tokens = int(batch.attention_mask.sum())
        metrics.update({"perf/total_num_tokens": n_tokens, "perf/throughput": n_tokens / timing["step"]})
        return metrics

    def _update(self, batch, old_logp, advantages, loss_mask, is_weights) -> dict[str, float]:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        s, cfg = self.s, self.actor_cfg
        loss_fn = get_policy_loss_fn(s.loss_mode)
        per_update = s.mini_batch_prompts * s.rollout_n
        total = batch.input_ids.shape[0]
        collected: dict[str, list[float]] = {}
        for _ in range(s.ppo_epochs):
            for start in range(0, total, per_update):
                rows = slice(start, min(total, start + per_update))
                cfg.global_batch_info.update({
                    "dp_size": 1, "batch_num_tokens": int(loss_mask[rows].sum()),
                    "global_batch_size": rows.stop - rows.start, "loss_scale_factor": cfg.loss_scale_factor})
                losses = []
                for m0 in range(rows.start, rows.stop, s.micro_batch):
                    micro = slice(m0, min(rows.stop, m0 + s.micro_batch))
                    logp, _ = self.actor.forward(select(batch, micro))
                    pg_loss, pg_metrics = loss_fn(
                        old_log_prob=old_logp[micro], log_prob=logp, advantages=advantages[micro],
                        response_mask=loss_mask[micro], loss_agg_mode=s.loss_agg_mode, config=cfg,
                        rollout_is_weights=None if is_weights is None else is_weights[micro])
                    losses.append(pg_loss)
                    for key, value in pg_metrics.items():
                        name = key if key.startswith("actor/") else f"actor/{key}"
                        collected.setdefault(name, []).append(float(value))
                grad_norm, _ = self.actor.step(losses)
                collected.setdefault("actor/pg_loss", []).append(float(sum(x.detach() for x in losses)))
                collected.setdefault("actor/grad_norm", []).append(grad_norm)
        out = {k: float(np.mean(v)) for k, v in collected.items()}
        out["actor/lr"] = float(self.actor.lr_scheduler.get_last_lr()[0])  # the lr of this step, logged as verl does
        self.actor.lr_scheduler.step()
        return out

    def validate(self, prompts: Prompts, step: int) -> dict[str, float]:
        """Return ``val-core/<source>/acc/mean@<n>`` on ``prompts`` with the validation sampling settings."""
        s = self.s
        tick = time.perf_counter()
        samples = self.rollout.generate(prompts.ids, s.val_n, s.val_temperature, s.val_top_p, s.max_response_length)
        scores = self._grade(samples, prompts.ground_truths)
        return {f"val-core/{prompts.data_source}/acc/mean@{s.val_n}": float(scores.mean()),
                "timing_s/testing": time.perf_counter() - tick}
