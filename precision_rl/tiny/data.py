"""The tiny sanity set: the data recipes' sanity-rebuild filter (k samples per problem, keep 20–80 % success)
run with the tiny model on a generated problem pool, plus a held-out validation set; verl parquet + manifest.

Both are cached per model: rebuilt when the model (its pretrain key) or the recipe below changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from precision_rl.config.precision import VLLM_DTYPES
from precision_rl.errors import UserError
from precision_rl.paths import data_root, vllm_cache_root
from precision_rl.verl_ext.cpu_overrides import VLLM_CPU_KVCACHE_GIB

TRAIN_RECIPE = "tiny_sanity"
VAL_RECIPE = "tiny_sanity_val"
TEMPLATE = "r1_distill_qwen"


@dataclass(frozen=True)
class TinyDataConfig:
    """How the tiny sanity set is drawn and filtered."""

    pool: int = 512
    k: int = 16
    low: float = 0.2
    high: float = 0.8
    # The paper trains ~88-115 epochs over its set; with 12 problems, the tiny run's 80 steps of 12 prompts are 80.
    max_train: int = 12
    val_problems: int = 64
    seed: int = 11
    max_tokens: int = 96
    dtype: str = VLLM_DTYPES["bf16"]


def _model_key(model_dir: Path) -> str:
    meta = Path(model_dir) / "pretrain.json"
    return json.loads(meta.read_text())["key"] if meta.is_file() else str(Path(model_dir).resolve())


STAMP_FILE = "tiny_stamp.json"  # beside the training parquet: which model and recipe built the set


def dataset_stamp(model_dir: Path, config: TinyDataConfig = TinyDataConfig()) -> dict:
    """Return the record that ties the tiny sets to the model and recipe that built them (a cache key)."""
    return {"model_key": _model_key(model_dir), "config": dataclasses.asdict(config)}


def ensure_datasets(model_dir: Path, train: str = TRAIN_RECIPE, val: tuple[str, ...] = (VAL_RECIPE,),
                    root: Path | None = None, config: TinyDataConfig = TinyDataConfig()) -> tuple[Path, list[Path]]:
    """Return (train parquet, [val parquet]) for the tiny model, building them when missing or stale."""
    from precision_rl.data.rebuild import rebuild_sanity
    from precision_rl.data.recipes import Recipe, dataset_file, write_dataset
    from precision_rl.data.sources import Problem
    from precision_rl.tiny.problems import make_problems

    if train != TRAIN_RECIPE or tuple(val) != (VAL_RECIPE,):
        raise UserError(f"the tiny scale knows the datasets {TRAIN_RECIPE} and {VAL_RECIPE}, not {train} / {list(val)}")
    root = Path(root or data_root())
    train_path = dataset_file(root, TRAIN_RECIPE, "train", TEMPLATE)
    val_path = dataset_file(root, VAL_RECIPE, "test", TEMPLATE)
    stamp_path = train_path.parent / STAMP_FILE
    stamp = dataset_stamp(model_dir, config)
    if train_path.is_file() and val_path.is_file() and stamp_path.is_file() and json.loads(stamp_path.read_text()) == stamp:
        return train_path, [val_path]

    generated = make_problems(config.pool + config.val_problems, seed=config.seed)
    to_problem = lambda p: Problem(p.question, p.answer)  # noqa: E731
    pool, held_out = [to_problem(p) for p in generated[: config.pool]], [to_problem(p) for p in generated[config.pool:]]
    print(f"building {TRAIN_RECIPE}: {config.k} samples x {len(pool)} generated problems, keeping "
          f"{config.low:.0%}-{config.high:.0%} success", flush=True)
    for key, value in {"VLLM_CPU_KVCACHE_SPACE": str(VLLM_CPU_KVCACHE_GIB), "VLLM_CACHE_ROOT": str(vllm_cache_root())}.items():
        os.environ.setdefault(key, value)
    result = rebuild_sanity(str(model_dir), pool, k=config.k, low=config.low, high=config.high, template=TEMPLATE,
                            dtype=config.dtype, max_tokens=config.max_tokens, seed=config.seed,
                            max_model_len=config.max_tokens + 128)
    if len(result.kept) < config.max_train:
        raise UserError(f"the tiny model solved too few problems in [{config.low}, {config.high}] "
                        f"({len(result.kept)} of {len(pool)}); rebuild the model with `make tiny-model`")
    kept = result.kept[: config.max_train]
    provenance = {"generator": "precision_rl.tiny.problems", **stamp, "pool": len(pool),
                  "in_band": len(result.kept), "kept": len(kept)}
    write_dataset(Recipe(TRAIN_RECIPE, "Tiny sanity set: generated arithmetic filtered by the tiny model",
                         "train", TEMPLATE), kept, provenance, root)
    write_dataset(Recipe(VAL_RECIPE, "Tiny validation set: held-out generated arithmetic (unfiltered)",
                         "test", TEMPLATE), held_out, provenance, root)
    stamp_path.write_text(json.dumps(stamp, indent=2))
    return train_path, [val_path]
