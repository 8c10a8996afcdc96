"""verl's synchronous V1 PPO trainer with the metrics the paper needs and verl 0.9.1 lacks.

- ``mismatch/probs_diff_{max,min}``: signed max and min of π − μ per step (verl logs |π − μ| only), and
  ``mismatch/abs_log_ratio_median``: the median of |log π − log μ| over the step's tokens, which one ill-conditioned
  token cannot move as it moves verl's token means; ``mismatch/sequence_kl_mean``: the paper's KL[μ‖π] per
  sequence (the mean over responses of Σ_t log μ − log π).
- Bypass mode (the PG algorithms): verl copies μ into π_old and skips both its mismatch metrics
  (``verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_old_log_prob`` returns before it calls
  ``calculate_debug_metrics``, and ``PPOTrainer._compute_advantage`` skips the rollout-correction metrics). Here
  the actor scores the batch
  once more, for metrics only, so ``training/rollout_probs_diff_*``, ``actor/entropy`` and ``rollout_corr/*``
  exist for every algorithm. The loss still uses μ as verl's bypass mode does.
- ``precision/loss_scale`` and ``precision/skipped_steps`` (cumulative over the run, kept in verl's checkpoint
  folder so a resumed run continues the count), from the engine's per-step report (``engine.py``).
- ``mismatch_extremes.jsonl`` in the run directory (the parent of ``trainer.default_local_dir``): the responses of a
  step holding a token with |π − μ| beyond the paper's FP16 extreme, with their prompts and π, μ per token.
- A stop after ``trainer.stop_after_step`` (``settings.STOP_AFTER_STEP_KEY``), the learning-rate schedule still
  spanning ``trainer.total_training_steps``: verl sets the optimizer's horizon in
  ``verl.trainer.ppo.v1.trainer_base.PPOTrainer._init_dataloader`` and ends its loop at ``self.total_training_steps``
  (with the last step's validation and checkpoint), so the loop's end is lowered after the horizon is set. A quick-
  profile run is then the first steps of the calibrated run of its seed.
- Rollout batches in dataset-row order (``row_order``) rather than in the order their samples finished, so that a
  rerun splits them into the same mini-batches.

verl's trainer registry refuses a second class under "sync" (``verl.trainer.ppo.v1.trainer_base.register_trainer``)
and the trainer's code branches on the name "sync" (``PPOTrainer._build_replay_buffer``, ``_init_dataloader``,
``_load_checkpoint``), so ``install_trainer`` puts this subclass of verl's own sync trainer in the registry entry
that ``verl.trainer.main_ppo.TaskRunnerV1.run`` looks up.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace

from precision_rl.metrics import (
    ACTOR_PREFIX,
    ENTROPY,
    EXTREMES_FILE,
    LOSS_SCALE,
    PAPER_FP16_PROBS_DIFF_EXTREME,
    SKIPPED_STEPS,
)
from precision_rl.verl_ext.settings import STOP_AFTER_STEP_KEY

STATE_FILE = "precision_rl_state.json"  # written into verl's global_step_<N> checkpoint folder
REPLAY_POLL_S = 0.05  # seconds between checks for a finished rollout batch
EXTREMES_PER_STEP = 8  # responses written per step at most, worst first


def row_order(keys: list[str], rows: list[int]) -> list[int]:
    """Return the positions of a rollout batch's samples ordered by dataset row, then by session and output.

    verl 0.9.1's replay buffer hands a batch over in the order its samples finished
    (``verl.trainer.ppo.v1.replay_buffer.ReplayBuffer._materialize_batch``), which varies from run to run; the order
    sets which samples share a mini-batch, so a repeatable run needs one that does not. ``keys`` have verl's form
    ``{uid}_{session}_{output}`` (the uid is random); ``rows`` are the samples' dataset row indices.
    """
    def position(i: int) -> tuple[int, int, int, str]:
        uid, session, output = keys[i].rsplit("_", 2)
        return rows[i], int(session), int(output), uid

    return sorted(range(len(keys)), key=position)


@functools.cache
def stop_after_step(config) -> int | None:
    """Return the step after which the run stops (``settings.STOP_AFTER_STEP_KEY`` in verl's config), or None."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(config, STOP_AFTER_STEP_KEY, default=None)
    return None if value is None else int(value)


def trainer_class() -> type:
    """Return the trainer class (built on first use, since verl is imported lazily)."""
    import transfer_queue as tq
    from verl import DataProto
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_corr_metrics_from_logprobs
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.workers.utils.padding import response_from_nested

    from precision_rl.verl_ext.mismatch_metrics import (
        abs_log_ratio_median,
        append_extremes,
        extreme_responses,
        sequence_kl,
        signed_probs_diff,
    )

    class PrecisionTrainer(PPOTrainerSync):
        """verl's sync trainer with signed mismatch, bypass-mode mismatch and loss-scale metrics."""

        skipped_steps_total = 0

        def _init_dataloader(self):
            super()._init_dataloader()
            stop = stop_after_step(self.config)
            if stop is not None:
                self.total_training_steps = min(self.total_training_steps, stop)

        def _build_replay_buffer(self):
            buffer = super()._build_replay_buffer()
            # verl waits for a finished rollout batch by polling its replay buffer every 2 s
            # (verl.trainer.ppo.v1.replay_buffer, not configurable): at tiny scale, where a rollout takes a few
            # seconds, that rounds every step up by a second on average.
            buffer.poll_interval = REPLAY_POLL_S
            sample = buffer.sample

            def sample_in_row_order(global_steps, partition_id, batch_size):
                batch, metrics = sample(global_steps, partition_id, batch_size)
                if not batch.keys:
                    return batch, metrics
                rows = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["index"])
                order = row_order(batch.keys, [int(i) for i in rows["index"]])
                return replace(batch, keys=[batch.keys[i] for i in order], tags=[batch.tags[i] for i in order]), metrics

            buffer.sample = sample_in_row_order
            return buffer

        def _bypass_mode(self) -> bool:
            corr = self.config.algorithm.get("rollout_correction", None)
            return bool(corr and corr.get("bypass_mode", False))

        def _policy_log_probs_for_metrics(self, batch, metrics: dict) -> DataProto:
            """Score the batch with the current actor (π_old) without touching the loss inputs; return the padded
            ``old_log_probs``, ``rollout_log_probs``, ``response_mask`` and ``responses``."""
            batch.extra_info.update({"calculate_entropy": True, "compute_loss": False,
                                     "temperature": self.config.actor_rollout_ref.rollout.temperature})
            self.actor_rollout_wg.compute_log_prob(batch)
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                   select_fields=["log_probs", "entropy", "response_mask", "responses",
                                                  "rollout_log_probs"])
            data["old_log_probs"] = response_from_nested(data.pop("log_probs"), data["response_mask"])
            data["entropy"] = response_from_nested(data.pop("entropy"), data["response_mask"])
            data = DataProto(batch=data.to_padded_tensor())
            actor = self.config.actor_rollout_ref.actor
            metrics[ENTROPY] = agg_loss(loss_mat=data.batch["entropy"], loss_mask=data.batch["response_mask"],
                                                loss_agg_mode=actor.loss_agg_mode,
                                                loss_scale_factor=actor.loss_scale_factor).detach().item()
            return data

        def _compute_old_log_prob(self, batch, metrics: dict):
            batch = super()._compute_old_log_prob(batch, metrics)
            if not self.config.actor_rollout_ref.rollout.calculate_log_probs:
                return batch
            if self._bypass_mode():
                data = self._policy_log_probs_for_metrics(batch, metrics)
                metrics.update(calculate_debug_metrics(data))
                metrics.update(compute_rollout_corr_metrics_from_logprobs(
                    data.batch["old_log_probs"], data.batch["rollout_log_probs"], data.batch["response_mask"]))
            else:
                fields = ["old_log_probs", "rollout_log_probs", "response_mask", "responses"]
                data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
                data = DataProto(batch=data.to_padded_tensor())
            for token_metrics in (signed_probs_diff, abs_log_ratio_median, sequence_kl):
                metrics.update(token_metrics(data.batch["old_log_probs"], data.batch["rollout_log_probs"],
                                             data.batch["response_mask"]))
            self._write_extremes(batch, data)
            return batch

        def _write_extremes(self, batch, data: DataProto) -> None:
            records = extreme_responses(data.batch["old_log_probs"], data.batch["rollout_log_probs"],
                                        data.batch["response_mask"], data.batch["responses"],
                                        PAPER_FP16_PROBS_DIFF_EXTREME, EXTREMES_PER_STEP)
            if not records:
                return
            keys = [batch.keys[r["row"]] for r in records]
            rows = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["prompts", "index"])
            run_dir = os.path.dirname(os.path.normpath(self.config.trainer.default_local_dir))
            append_extremes(os.path.join(run_dir, EXTREMES_FILE), self.global_steps, records,
                            [p.tolist() for p in rows["prompts"].unbind()], [int(i) for i in rows["index"]])

        def _update_actor(self, batch, metrics: dict):
            batch = super()._update_actor(batch, metrics)
            scale = metrics.pop(ACTOR_PREFIX + LOSS_SCALE, None)
            skipped = metrics.pop(ACTOR_PREFIX + SKIPPED_STEPS, None)
            if scale is not None:
                metrics[LOSS_SCALE] = float(scale)
            if skipped is not None:
                self.skipped_steps_total += int(round(float(skipped)))
                metrics[SKIPPED_STEPS] = float(self.skipped_steps_total)
            return batch

        def _step_folder(self) -> str:
            return os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")

        def _save_checkpoint(self):
            # Written before verl's own files, so the folder verl marks as latest always has it.
            os.makedirs(self._step_folder(), exist_ok=True)
            with open(os.path.join(self._step_folder(), STATE_FILE), "w") as fh:
                json.dump({"skipped_steps_total": self.skipped_steps_total}, fh)
            super()._save_checkpoint()

        def _load_checkpoint(self):
            super()._load_checkpoint()
            path = os.path.join(self._step_folder(), STATE_FILE)
            if self.global_steps > 0 and os.path.isfile(path):
                with open(path) as fh:
                    self.skipped_steps_total = int(json.load(fh)["skipped_steps_total"])

    return PrecisionTrainer


def install_trainer() -> type:
    """Make verl's V1 ``sync`` trainer mode (its default) run ``PrecisionTrainer``; return the class."""
    from verl.trainer.ppo.v1 import trainer_base

    current = trainer_base.TRAINER_REGISTRY.get("sync")
    if current is not None and current.__name__ == "PrecisionTrainer":
        return current
    cls = trainer_class()
    trainer_base.TRAINER_REGISTRY["sync"] = cls
    return cls
