"""``run_tiny``: a tiny-scale run in its run directory — manifest, verl-format metrics, checkpoints, resume,
a progress bar with reward and mismatch, and a valid directory after Ctrl-C."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

from precision_rl import runs
from precision_rl.errors import UserError
from precision_rl.launch import RunPlan, begin_attempt, finish_attempt
from precision_rl.tiny import data as tiny_data
from precision_rl.tiny.pretrain import resolve_model
from precision_rl.tiny.trainer import Prompts, TinyTrainer, tiny_overrides, verl_settings
from precision_rl.verl_overrides import FILE_LOGGER_ENV, PROJECT_NAME

CHECKPOINT = "checkpoint.pt"  # written atomically after every step, so an interrupt loses at most the step in flight


class _Tee:
    """Write to a stream and to the run's train.log."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text):
        self.log.write(text)
        return self.stream.write(text)

    def flush(self):
        self.log.flush()
        self.stream.flush()

    def isatty(self):
        return self.stream.isatty()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _prompts(frame, tokenizer, data_source: str) -> Prompts:
    ids = [tokenizer.apply_chat_template(list(p), tokenize=True, add_generation_prompt=True) for p in frame["prompt"]]
    ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
    return Prompts(ids, [rm["ground_truth"] for rm in frame["reward_model"]], data_source)


def batch_rows(n_rows: int, batch: int, step: int, seed: int) -> np.ndarray:
    """Return the dataset rows of (1-based) ``step``: a seeded permutation per epoch, so resumes replay exactly."""
    per_epoch = max(1, n_rows // batch)
    epoch, k = divmod(step - 1, per_epoch)
    order = np.random.default_rng(seed * 1000 + epoch).permutation(n_rows)
    return order[k * batch:(k + 1) * batch]


def _save_checkpoint(trainer: TinyTrainer, run_dir: Path, step: int) -> None:
    import torch

    path = run_dir / CHECKPOINT
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"step": step, "model": trainer.actor.model.state_dict(),
                "optimizer": trainer.actor.optimizer.state_dict(),
                "lr_scheduler": trainer.actor.lr_scheduler.state_dict(),
                "scaler": trainer.actor.scaler.state_dict() if trainer.actor.scaler else None,
                "skipped_steps": trainer.actor.skipped_steps}, tmp)
    os.replace(tmp, path)


def _load_checkpoint(trainer: TinyTrainer, run_dir: Path) -> int:
    import torch

    path = run_dir / CHECKPOINT
    if not path.is_file():
        return 0
    state = torch.load(path, weights_only=False)
    trainer.actor.model.load_state_dict(state["model"])
    trainer.actor.optimizer.load_state_dict(state["optimizer"])
    if "lr_scheduler" in state:
        trainer.actor.lr_scheduler.load_state_dict(state["lr_scheduler"])
    if trainer.actor.scaler and state["scaler"]:
        trainer.actor.scaler.load_state_dict(state["scaler"])
    trainer.actor.skipped_steps = state["skipped_steps"]
    trainer.sync()
    return int(state["step"])


def describe(plan: RunPlan, settings) -> str:
    """Return a one-paragraph description of a tiny run (what DRY_RUN prints)."""
    return (f"tiny run {plan.name}: model {plan.spec.model}, data {plan.spec.data.train} -> {plan.run_dir}\n"
            f"  train {plan.arm.train} / infer {plan.arm.infer}, {settings.total_steps} steps x "
            f"{settings.train_batch_size} prompts x {settings.rollout_n} samples, loss {settings.loss_mode}"
            f"{' (bypass)' if settings.bypass else ''}, IS {settings.rollout_is} {settings.rollout_is_threshold}, "
            f"RS {settings.rollout_rs} {settings.rollout_rs_threshold}")


def run_tiny(plan: RunPlan) -> int:
    """Run ``plan`` at tiny scale and return 0 (or raise UserError / KeyboardInterrupt)."""
    from tqdm import tqdm
    from transformers import AutoTokenizer

    spec, arm, options = plan.spec, plan.arm, plan.options
    settings, actor_cfg = verl_settings(spec, arm, options.seed, list(options.extra))
    if options.dry_run:
        print(describe(plan, settings))
        return 0
    model_dir = resolve_model(spec.model)
    train_path, val_path = tiny_data.ensure_datasets(model_dir, spec.data.train, spec.data.val)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    import pandas as pd

    train_frame = pd.read_parquet(train_path)
    val_sets = [_prompts(pd.read_parquet(p), tokenizer, name) for name, p in zip(spec.data.val, val_path, strict=True)]
    train = _prompts(train_frame, tokenizer, spec.data.train)
    if len(train.ids) < settings.gen_batch_size:
        raise UserError(f"{train_path} has {len(train.ids)} prompts, fewer than one batch of {settings.gen_batch_size}")

    plan.argv = ["python", "-m", "precision_rl", *sys.argv[1:]]
    plan.overrides = tiny_overrides(spec, arm, options.seed, list(options.extra))
    begin_attempt(plan)
    doc = runs.read_manifest(plan.run_dir)
    doc["tiny"] = {"settings": dataclasses.asdict(settings), "model_dir": str(model_dir),
                   "datasets": runs.dataset_hashes([train_path, *val_path])}
    runs.write_manifest(plan.run_dir, doc)

    os.environ[FILE_LOGGER_ENV] = str(plan.metrics_path)
    log_file = open(plan.run_dir / runs.TRAIN_LOG, "a", buffering=1)
    started = time.time()
    with contextlib.redirect_stdout(_Tee(sys.stdout, log_file)), contextlib.redirect_stderr(_Tee(sys.stderr, log_file)):
        from verl.utils.tracking import FileLogger

        print(describe(plan, settings), flush=True)
        logger = FileLogger(PROJECT_NAME, plan.name)
        trainer = TinyTrainer(settings, actor_cfg, arm, model_dir, spec.template, options.seed, tokenizer.pad_token_id)
        done = _load_checkpoint(trainer, plan.run_dir) if plan.attempt > 0 else 0
        step = done
        try:
            if done == 0 and settings.val_before_train:
                logger.log(data=_validate(trainer, val_sets, 0), step=0)
            bar = tqdm(range(done + 1, settings.total_steps + 1), desc=plan.name, disable=None, file=sys.stderr,
                       initial=done, total=settings.total_steps)
            for step in bar:
                rows = batch_rows(len(train.ids), settings.gen_batch_size, step, options.seed)
                metrics = trainer.step(Prompts([train.ids[i] for i in rows], [train.ground_truths[i] for i in rows],
                                               train.data_source), step)
                metrics["training/global_step"] = step
                if step % settings.test_freq == 0 or step == settings.total_steps:
                    metrics.update(_validate(trainer, val_sets, step))
                logger.log(data=metrics, step=step)
                bar.set_postfix(reward=f"{metrics['critic/score/mean']:.3f}",
                                diff=f"{metrics['training/rollout_probs_diff_mean']:.2e}",
                                kl=f"{metrics['rollout_corr/kl']:.1e}")
                _save_checkpoint(trainer, plan.run_dir, step)
        except KeyboardInterrupt:
            logger.finish()
            finish_attempt(plan, "interrupted", None)
            print(f"interrupted: {plan.run_dir} is valid; RESUME=1 continues it", file=sys.stderr)
            raise
        except Exception:
            logger.finish()
            finish_attempt(plan, "failed", None)
            raise
        logger.finish()
    log_file.close()
    finish_attempt(plan, "finished", 0)
    print(f"{plan.name}: {settings.total_steps} steps in {time.time() - started:.0f} s; logs in {plan.run_dir}",
          file=sys.stderr)
    return 0


def _validate(trainer: TinyTrainer, val_sets: list[Prompts], step: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for prompts in val_sets:
        out.update(trainer.validate(prompts, step))
    return out
