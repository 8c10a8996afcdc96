"""The tiny sanity set: the data recipes' sanity-rebuild filter (k samples per problem, keep 20–80 % success)
run with the tiny model on a generated problem pool, plus a held-out validation set; verl parquet + manifest.

The filter samples with vLLM, so two builds keep different problems, and on 12 problems that moves a run's final
reward as much as the precision does. The problems it kept once are therefore committed (``sanity_selection.json``)
and every build whose recipe matches takes them from there; ``refilter=True`` runs the filter again. Both sets are
cached per model: rebuilt when the model (its pretrain key), the recipe below or the selection changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from precision_rl.config.precision import VLLM_DTYPES
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_text
from precision_rl.paths import data_root, vllm_cache_root
from precision_rl.tiny.pretrain import build_record
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
    min_ops: int = 2  # the generated chains' length range (precision_rl.tiny.problems)
    max_ops: int = 3
    max_prompt_tokens: int = 128  # the filter engine's context is this plus max_tokens


def _model_key(model_dir: Path) -> str:
    record = build_record(model_dir)
    return record["key"] if record else str(Path(model_dir).resolve())


STAMP_FILE = "tiny_stamp.json"  # beside the training parquet: which model and recipe built the set
SELECTION_FILE = Path(__file__).with_name("sanity_selection.json")
COMMITTED, FILTERED = "committed", "filtered"


@dataclass(frozen=True)
class Selection:
    """Problems the filter kept once: their index in the generated pool and their success rate then."""

    model_key: str
    config: dict
    pool_indices: tuple[int, ...]
    questions: tuple[str, ...]
    success_rates: tuple[float, ...]


def committed_selection(model_key: str, config: TinyDataConfig = TinyDataConfig(),
                        path: Path = SELECTION_FILE) -> Selection | None:
    """Return the committed selection when it was drawn by the model ``model_key`` with ``config``'s recipe, else
    None."""
    if not Path(path).is_file():
        return None
    record = json.loads(Path(path).read_text())
    if record["model_key"] != model_key or record["config"] != dataclasses.asdict(config):
        return None
    problems = record["problems"]
    return Selection(record["model_key"], record["config"], tuple(p["pool_index"] for p in problems), tuple(p["question"] for p in problems),
                     tuple(p["success_rate"] for p in problems))


def dataset_stamp(model_dir: Path, config: TinyDataConfig = TinyDataConfig(), refilter: bool = False) -> dict:
    """Return the record that ties the tiny sets to the model, recipe and selection that built them (a cache key)."""
    model_key = _model_key(model_dir)
    selection = None if refilter else committed_selection(model_key, config)
    return {"model_key": model_key, "config": dataclasses.asdict(config),
            "selection": COMMITTED if selection else FILTERED,
            **({"pool_indices": list(selection.pool_indices)} if selection else {})}


def selected_problems(pool: list, selection: Selection) -> list:
    """Return the pool's problems at the selection's indices, each annotated with its success rate; raise UserError
    when the generator no longer yields the committed questions there."""
    from precision_rl.data.sources import Problem

    picked = []
    for index, question, rate in zip(selection.pool_indices, selection.questions, selection.success_rates, strict=True):
        if index >= len(pool) or pool[index].question != question:
            raise UserError(f"{SELECTION_FILE.name}: pool problem {index} is no longer {question!r}; the generator "
                            "changed, so draw a new selection with `make tiny-model REFILTER=1`")
        picked.append(Problem(pool[index].question, pool[index].answer, {**pool[index].extra, "success_rate": rate}))
    return picked


def ensure_datasets(model_dir: Path, train: str = TRAIN_RECIPE, val: tuple[str, ...] = (VAL_RECIPE,),
                    root: Path | None = None, config: TinyDataConfig = TinyDataConfig(),
                    refilter: bool = False) -> tuple[Path, list[Path]]:
    """Return (train parquet, [val parquet]) for the tiny model, building them when missing or stale: from the
    committed selection, or (``refilter``, or no selection for this recipe) through the vLLM filter."""
    from precision_rl.data.recipes import Recipe, dataset_file, write_dataset
    from precision_rl.data.sources import Problem
    from precision_rl.tiny.problems import make_problems

    if train != TRAIN_RECIPE or tuple(val) != (VAL_RECIPE,):
        raise UserError(f"the tiny scale knows the datasets {TRAIN_RECIPE} and {VAL_RECIPE}, not {train} / {list(val)}")
    root = Path(root or data_root())
    train_path = dataset_file(root, TRAIN_RECIPE, "train", TEMPLATE)
    val_path = dataset_file(root, VAL_RECIPE, "test", TEMPLATE)
    stamp_path = train_path.parent / STAMP_FILE
    stamp = dataset_stamp(model_dir, config, refilter)
    if train_path.is_file() and val_path.is_file() and stamp_path.is_file() and json.loads(stamp_path.read_text()) == stamp:
        return train_path, [val_path]

    generated = make_problems(config.pool + config.val_problems, seed=config.seed, min_ops=config.min_ops,
                              max_ops=config.max_ops)
    to_problem = lambda p: Problem(p.question, p.answer)  # noqa: E731
    pool, held_out = [to_problem(p) for p in generated[: config.pool]], [to_problem(p) for p in generated[config.pool:]]
    selection = None if refilter else committed_selection(stamp["model_key"], config)
    if selection:
        print(f"building {TRAIN_RECIPE}: the {len(selection.pool_indices)} problems of {SELECTION_FILE.name}", flush=True)
        kept, in_band = selected_problems(pool, selection), None
    else:
        kept, in_band = _filter(model_dir, pool, config)
        if refilter:
            write_selection(stamp["model_key"], config, pool, kept, in_band)
            stamp = dataset_stamp(model_dir, config)
    provenance = {"generator": "precision_rl.tiny.problems", **stamp, "pool": len(pool),
                  **({"in_band": in_band} if in_band is not None else {}), "kept": len(kept)}
    write_dataset(Recipe(TRAIN_RECIPE, "Tiny sanity set: generated arithmetic filtered by the tiny model",
                         "train", TEMPLATE), kept, provenance, root)
    write_dataset(Recipe(VAL_RECIPE, "Tiny validation set: held-out generated arithmetic (unfiltered)",
                         "test", TEMPLATE), held_out, provenance, root)
    stamp_path.write_text(json.dumps(stamp, indent=2))
    return train_path, [val_path]


def filter_pool(model_dir: Path, pool: list, config: TinyDataConfig):
    """Sample ``config.k`` responses per problem of ``pool`` from the model with vLLM (T=1); return the
    RebuildResult: every problem's success rate and the problems within ``[config.low, config.high]``."""
    from precision_rl.data.rebuild import rebuild_sanity

    for key, value in {"VLLM_CPU_KVCACHE_SPACE": str(VLLM_CPU_KVCACHE_GIB), "VLLM_CACHE_ROOT": str(vllm_cache_root())}.items():
        os.environ.setdefault(key, value)
    return rebuild_sanity(str(model_dir), pool, k=config.k, low=config.low, high=config.high, template=TEMPLATE,
                          dtype=config.dtype, max_tokens=config.max_tokens, seed=config.seed,
                          max_model_len=config.max_tokens + config.max_prompt_tokens)


def _filter(model_dir: Path, pool: list, config: TinyDataConfig) -> tuple[list, int]:
    print(f"building {TRAIN_RECIPE}: {config.k} samples x {len(pool)} generated problems, keeping "
          f"{config.low:.0%}-{config.high:.0%} success", flush=True)
    result = filter_pool(model_dir, pool, config)
    if len(result.kept) < config.max_train:
        raise UserError(f"the tiny model solved too few problems in [{config.low}, {config.high}] "
                        f"({len(result.kept)} of {len(pool)}); rebuild the model with `make tiny-model`")
    return result.kept[: config.max_train], len(result.kept)


def write_selection(model_key: str, config: TinyDataConfig, pool: list, kept: list, in_band: int,
                    path: Path = SELECTION_FILE) -> Path:
    """Write the filter's kept problems as the selection every later build takes (commit it to share it); return
    its path."""
    questions = [p.question for p in pool]
    record = {
        "about": "The tiny sanity set's problems: the first max_train problems of the generated pool whose success "
                 "rate over k samples of the tiny model (vLLM, T=1) lay in [low, high]. Drawn by "
                 "`make tiny-model REFILTER=1`; every other build takes them from here.",
        "model_key": model_key, "config": dataclasses.asdict(config), "in_band": in_band,
        "problems": [{"pool_index": questions.index(p.question), "question": p.question,
                      "success_rate": p.extra["success_rate"]} for p in kept],
    }
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    print(f"{TRAIN_RECIPE}: wrote the new selection to {path}; commit it to make it the set", flush=True)
    return Path(path)
