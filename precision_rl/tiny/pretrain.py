"""SFT of the tiny base model on generated arithmetic, to a partial accuracy at temperature 1, cached by config.

``ensure_tiny_model()`` returns the cached model directory, building it (with a progress bar) when absent.
Deterministic given the config's seed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.fileio import atomic_dir
from precision_rl.paths import tiny_models_root
from precision_rl.tiny.model import IM_END, TinyModelConfig, build_random_model, config_key
from precision_rl.tiny.problems import make_problems, user_message

TINY_MODEL_ALIAS = "tiny"
PROGRESS_INTERVAL_S = 30.0
BUILD_RECORD = "pretrain.json"  # in each built model's folder: its recipe, cache key and SFT losses


@dataclass(frozen=True)
class PretrainConfig:
    """SFT recipe of the tiny base model (part of the cache key)."""

    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    problems: int = 20000
    steps: int = 1200
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 20
    min_ops: int = 2
    max_ops: int = 3
    data_seed: int = 7

    def key(self) -> str:
        """Return a short hash identifying this recipe and its model configuration."""
        return config_key(self)


# The long-answer model: the tiny recipe on chains of 2-24 operations (a ~150-token prompt and a ~255-token answer at
# 24, within the 512 positions), trained for the offline studies' 400 steps on half the batch (its sequences are ~3x
# as long). The long-answer mismatch study and the solve-rate probe use it.
LONG_ANSWER_RECIPE = PretrainConfig(min_ops=2, max_ops=24, steps=400, batch_size=16)
LONG_ANSWER_TOKENS = (160, 320)  # (prompt, response) budget that holds a 24-operation chain


def model_dir(config: PretrainConfig = PretrainConfig()) -> Path:
    """Return where the SFT-trained tiny model of ``config`` is cached."""
    return tiny_models_root() / config.key()


def _encode(tokenizer, problems) -> list[tuple[list[int], int]]:
    """Return (token ids, prompt length) per problem: chat prompt + reference solution + end of turn."""
    out = []
    for p in problems:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": user_message(p)}], tokenize=False,
                                               add_generation_prompt=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(p.solution() + IM_END, add_special_tokens=False)["input_ids"]
        out.append((prompt_ids + response_ids + [tokenizer.eos_token_id], len(prompt_ids)))
    return out


def sft(model, tokenizer, config: PretrainConfig, progress: bool = True) -> list[float]:
    """Train ``model`` in place on reference solutions (loss on response tokens); return the loss per step."""
    import torch
    from tqdm import tqdm

    torch.manual_seed(config.model.seed)
    rng = random.Random(config.data_seed)
    examples = _encode(tokenizer, make_problems(config.problems, seed=config.data_seed,
                                                min_ops=config.min_ops, max_ops=config.max_ops))
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < config.warmup:
            return config.lr * (step + 1) / config.warmup
        frac = (step - config.warmup) / max(1, config.steps - config.warmup)
        return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    losses = []
    model.train()
    # Outside a terminal (a log file, CI) the bar still reports, every PROGRESS_INTERVAL_S seconds.
    interval = 0.1 if sys.stderr.isatty() else PROGRESS_INTERVAL_S
    bar = tqdm(range(config.steps), desc="tiny model SFT", disable=not progress, mininterval=interval,
               maxinterval=max(interval, 10.0))
    for step in bar:
        batch = [examples[rng.randrange(len(examples))] for _ in range(config.batch_size)]
        width = max(len(ids) for ids, _ in batch)
        pad = tokenizer.pad_token_id
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (ids, prompt_len) in enumerate(batch):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            labels[i, prompt_len: len(ids)] = torch.tensor(ids[prompt_len:])
            attention[i, : len(ids)] = 1
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    model.eval()
    return losses


def build_tiny_model(out_dir: Path, config: PretrainConfig = PretrainConfig(), progress: bool = True) -> Path:
    """Build the SFT-trained tiny model into ``out_dir`` atomically; return the directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    with atomic_dir(out_dir) as work:
        build_random_model(work, config.model)
        tokenizer = AutoTokenizer.from_pretrained(work)
        model = AutoModelForCausalLM.from_pretrained(work, dtype=torch.float32)
        losses = sft(model, tokenizer, config, progress)
        model.save_pretrained(work, safe_serialization=True)
        (work / BUILD_RECORD).write_text(json.dumps({
            "config": dataclasses.asdict(config), "key": config.key(), "final_loss": losses[-1],
            "first_loss": losses[0], "seconds": round(time.time() - started, 1)}, indent=2))
    return Path(out_dir)


def build_record(model: Path | str) -> dict | None:
    """Return the build record of a tiny model folder (its recipe, cache key, first and final SFT loss, seconds),
    or None for a folder without one (a hub model, a random model)."""
    record = Path(model) / BUILD_RECORD
    return json.loads(record.read_text()) if record.is_file() else None


def ensure_tiny_model(config: PretrainConfig = PretrainConfig(), progress: bool = True) -> Path:
    """Return the cached SFT-trained tiny model directory, building it first when it is missing."""
    path = model_dir(config)
    if (path / BUILD_RECORD).is_file():
        return path
    print(f"building the tiny model (cached in {path})", flush=True)
    try:
        return build_tiny_model(path, config, progress)
    except (OSError, RuntimeError, ValueError) as exc:
        raise UserError(f"could not build the tiny model in {path}: {exc}") from exc


def model_path(name: str) -> Path:
    """Return the model directory a registry ``model`` value names at tiny scale (``tiny``: the cached SFT model,
    built or not; otherwise a local HF model directory, which must exist)."""
    if name == TINY_MODEL_ALIAS:
        return model_dir()
    path = Path(name).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise UserError(f"tiny-scale model {name!r} is neither 'tiny' nor a local HF model directory")
    return path


def resolve_model(name: str) -> Path:
    """Return the model directory for a registry ``model`` value at tiny scale, building the tiny model first when
    ``name`` is ``tiny`` and it is not cached yet."""
    return ensure_tiny_model() if name == TINY_MODEL_ALIAS else model_path(name)
