"""SFT of the tiny base model on generated arithmetic, to a partial accuracy at temperature 1.

The recipe's default (``PretrainConfig()``) is the shipped base model (``precision_rl.tiny.shipped``): runs load it
from the repository, checked by sha256, and never train it; ``rebuild_shipped_model`` (``make tiny-model
REBUILD=1``) trains it again from the recipe and records how the rebuild relates to the shipped bytes. Other
recipes (the offline studies' wider and longer-answer models) are built on first use and cached by their key. The
SFT computes in fp32 and is deterministic given the recipe's seeds, the torch build and the CPU's instruction set.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.fileio import atomic_dir, atomic_write_text
from precision_rl.paths import tiny_models_root
from precision_rl.tiny.model import IM_END, TinyModelConfig, build_random_model, config_key
from precision_rl.tiny.problems import make_problems, user_message
from precision_rl.tiny.shipped import SHIPPED_DIR, WEIGHTS_FILE, folder_checksums, verify, write_checksums

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
    # The SFT's compute dtype: "float32" (no autocast), or a 16-bit type to autocast to (slow on CPUs without that
    # type's matrix instructions).
    sft_dtype: str = "float32"

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

    compute_dtype = getattr(torch, config.sft_dtype)
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
        with torch.autocast("cpu", dtype=compute_dtype, enabled=compute_dtype != torch.float32):
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
    """Build the SFT-trained tiny model into ``out_dir`` atomically, with its build record and ``SHA256SUMS``;
    return the directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.time()
    with atomic_dir(out_dir) as work:
        build_random_model(work, config.model)
        tokenizer = AutoTokenizer.from_pretrained(work)
        model = AutoModelForCausalLM.from_pretrained(work, dtype=torch.float32)
        losses = sft(model, tokenizer, config, progress)
        model.save_pretrained(work, safe_serialization=True)
        record = {"config": dataclasses.asdict(config), "key": config.key(), "first_loss": losses[0],
                  "final_loss": losses[-1], "seconds": round(time.time() - started, 1), **build_environment()}
        (work / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        write_checksums(work)
    return Path(out_dir)


def build_environment() -> dict:
    """Return what a build's bytes depend on besides the recipe: the date, the libraries, the CPU and threads."""
    import importlib.metadata

    import torch

    from precision_rl.verl_ext.cpu.features import cpu_model, matrix_flags

    return {"built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": {name: importlib.metadata.version(name) for name in ("torch", "transformers", "tokenizers")},
            "cpu_model": cpu_model(), "cpu_matrix_flags": matrix_flags(),
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads()}


def build_record(model: Path | str) -> dict | None:
    """Return the build record of a tiny model folder (its recipe, key, SFT losses and seconds, the environment it
    was built in, and any rebuilds compared with it), or None for a folder without one (a hub or random model)."""
    record = Path(model) / BUILD_RECORD
    return json.loads(record.read_text()) if record.is_file() else None


def shipped_model() -> Path:
    """Return the shipped base model's folder after checking it against its checksums and the recipe; raise
    UserError when a file is missing or changed, or the code's recipe is no longer the one it was built from."""
    folder = verify(SHIPPED_DIR)
    record = build_record(folder) or {}
    if record.get("key") != PretrainConfig().key():
        raise UserError(f"the shipped tiny model was built from recipe {record.get('key')} but the code's recipe is "
                        f"{PretrainConfig().key()}: rebuild it with `make tiny-model REBUILD=1`")
    return folder


def ensure_tiny_model(config: PretrainConfig = PretrainConfig(), progress: bool = True) -> Path:
    """Return the model of recipe ``config``: the shipped base model for the default recipe, else the cached build,
    building it first when it is missing."""
    if config == PretrainConfig():
        return shipped_model()
    path = model_dir(config)
    if (path / BUILD_RECORD).is_file():
        return path
    print(f"building the tiny model of recipe {config.key()} (cached in {path})", flush=True)
    try:
        return build_tiny_model(path, config, progress)
    except (OSError, RuntimeError, ValueError) as exc:
        raise UserError(f"could not build the tiny model in {path}: {exc}") from exc


def model_path(name: str) -> Path:
    """Return the model directory a registry ``model`` value names at tiny scale: ``tiny`` is the shipped base
    model (checked); anything else must be a local HF model directory."""
    if name == TINY_MODEL_ALIAS:
        return shipped_model()
    path = Path(name).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise UserError(f"tiny-scale model {name!r} is neither 'tiny' nor a local HF model directory")
    return path


def _max_weight_difference(a: Path, b: Path) -> float:
    """Return the largest absolute difference between the weights of two tiny model folders of one architecture."""
    from safetensors.torch import load_file

    left, right = load_file(Path(a) / WEIGHTS_FILE), load_file(Path(b) / WEIGHTS_FILE)
    return max(float((left[k].double() - right[k].double()).abs().max()) for k in left)


def rebuild_shipped_model(progress: bool = True) -> dict:
    """Train the shipped base model again from its recipe and compare the result with the shipped bytes; return the
    comparison.

    Identical weights and tokenizer: the shipped files stay, and the rebuild is appended to the build record's
    ``rebuilds``. Different ones: the rebuild replaces the shipped folder (git keeps the shipped bytes), its record
    saying which weights it replaced and by how much they differ.
    """
    scratch = tiny_models_root() / f"rebuild-{PretrainConfig().key()}"
    build_tiny_model(scratch, PretrainConfig(), progress)
    new, old = folder_checksums(scratch), folder_checksums(SHIPPED_DIR) if SHIPPED_DIR.is_dir() else {}
    compared = [name for name in new if name != BUILD_RECORD]
    rebuilt = build_record(scratch)
    environment = ("built", "versions", "cpu_model", "cpu_matrix_flags", "torch_cpu_capability", "torch_threads",
                   "seconds")
    comparison = {**{k: rebuilt.get(k) for k in environment}, "weights_sha256": new[WEIGHTS_FILE],
                  "identical": all(old.get(name) == new[name] for name in compared),
                  "differing_files": [name for name in compared if old.get(name) != new[name]]}
    if WEIGHTS_FILE in old:
        comparison["max_abs_weight_difference"] = _max_weight_difference(scratch, SHIPPED_DIR)
    if comparison["identical"]:
        shipped = build_record(SHIPPED_DIR)
        shipped.setdefault("rebuilds", []).append(comparison)
        atomic_write_text(SHIPPED_DIR / BUILD_RECORD, json.dumps(shipped, indent=2) + "\n")
        write_checksums(SHIPPED_DIR)
        shutil.rmtree(scratch)
    else:
        rebuilt["replaces"] = {"weights_sha256": old.get(WEIGHTS_FILE), **{k: comparison[k] for k in (
            "differing_files", "max_abs_weight_difference") if k in comparison}}
        atomic_write_text(scratch / BUILD_RECORD, json.dumps(rebuilt, indent=2) + "\n")
        write_checksums(scratch)
        with atomic_dir(SHIPPED_DIR) as work:
            shutil.copytree(scratch, work, dirs_exist_ok=True)
        shutil.rmtree(scratch)
    return comparison
