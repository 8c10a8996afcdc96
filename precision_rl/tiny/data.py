"""The tiny sanity set and its held-out validation set, from the committed problem list; verl parquet + manifest.

The sanity set is the paper's filter (k samples per problem at T=1, keep the problems solved 20–80 % of the time)
run once with the shipped base model over a generated pool; the held-out validation set is further generated
problems, unfiltered. Both are committed as one problem list (``sanity_problems.json``: question, answer, chain
length, and for the training problems their pool index and success rate), together with the sha256 of the model
weights that filtered it and the filter's settings, so every run trains and validates on the same problems.
``refilter`` (``make tiny-model REFILTER=1``) runs the filter again with the current model and rewrites the list.
The parquets are rebuilt when the list or the template changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_text, sha256_file
from precision_rl.paths import data_root, vllm_cache_root
from precision_rl.tiny.shipped import CHECKSUMS_FILE, WEIGHTS_FILE, weights_sha256
from precision_rl.verl_ext.cpu.overrides import VLLM_CPU_KVCACHE_GIB

TRAIN_RECIPE = "tiny_sanity"
VAL_RECIPE = "tiny_sanity_val"
TEMPLATE = "r1_distill_qwen"
PROBLEMS_FILE = Path(__file__).with_name("sanity_problems.json")
STAMP_FILE = "tiny_stamp.json"  # beside the training parquet: which problem list built the sets


@dataclass(frozen=True)
class TinyDataConfig:
    """How the tiny sanity set is drawn and filtered, and how large the held-out validation set is."""

    pool: int = 1024  # generated problems the filter scores
    k: int = 16  # samples per problem
    low: float = 0.2  # the paper's band of success rates kept
    high: float = 0.8
    max_train: int = 256  # the first problems in the band form the sanity set
    val_problems: int = 128  # further generated problems, unfiltered
    seed: int = 11  # of the problem generator and the filter's sampling
    max_tokens: int = 96
    # fp32 sampling, so that the filter favours neither 16-bit format's rounding.
    dtype: str = "float32"
    min_ops: int = 2  # the generated chains' length range (precision_rl.tiny.problems)
    max_ops: int = 3
    max_prompt_tokens: int = 128  # the filter engine's context is this plus max_tokens


@dataclass(frozen=True)
class ProblemList:
    """The committed problems: who filtered them with which settings, the training set and the validation set."""

    model_weights_sha256: str
    config: dict
    in_band: int
    train: tuple[dict, ...]
    validation: tuple[dict, ...]


def model_weights_sha256(model_dir: Path) -> str:
    """Return the sha256 of a tiny model folder's weights: the recorded one where the folder lists its checksums,
    else computed."""
    model_dir = Path(model_dir)
    return weights_sha256(model_dir) if (model_dir / CHECKSUMS_FILE).is_file() else sha256_file(model_dir / WEIGHTS_FILE)


def instrument_record(model_dir: Path, problems: Path = PROBLEMS_FILE) -> dict:
    """Return what calibrates a tiny run, as its manifest records it: the sha256 of the model's weights and of the
    sanity problem list (its path relative to the repository)."""
    from precision_rl.paths import REPO_ROOT

    return {"model_weights_sha256": model_weights_sha256(Path(model_dir)),
            "problem_list": str(Path(problems).relative_to(REPO_ROOT)), "problem_list_sha256": sha256_file(problems)}


def instrument_problem(recorded: dict | None, current: dict) -> str | None:
    """Return why a tiny run whose manifest records the instrument ``recorded`` was not made with the ``current``
    one (``instrument_record`` of the shipped model), or None when it was."""
    if not recorded:
        return ("its manifest records no tiny instrument: it ran on the retired 12-problem instrument, before the "
                "shipped model and problem list were calibrated")
    for field, what in (("model_weights_sha256", "model weights"), ("problem_list_sha256", "problem list")):
        if recorded.get(field) != current[field]:
            return (f"it ran with other {what} ({str(recorded.get(field))[:12]}…) than the shipped instrument's "
                    f"({current[field][:12]}…)")
    return None


def read_problem_list(path: Path = PROBLEMS_FILE) -> ProblemList:
    """Return the committed problem list; raise UserError when it is missing or malformed."""
    try:
        doc = json.loads(Path(path).read_text())
        return ProblemList(doc["model_weights_sha256"], doc["config"], doc["in_band"], tuple(doc["train"]),
                           tuple(doc["validation"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a readable tiny problem list ({exc}); `git checkout -- {path}` restores the "
                        "committed one, `make tiny-model REFILTER=1` draws a new one") from None


def checked_problem_list(model_dir: Path, config: TinyDataConfig = TinyDataConfig(),
                         path: Path = PROBLEMS_FILE) -> ProblemList:
    """Return the committed problem list after checking that ``model_dir``'s weights filtered it with ``config``;
    raise UserError otherwise."""
    problems = read_problem_list(path)
    model = model_weights_sha256(model_dir)
    if problems.model_weights_sha256 != model:
        raise UserError(f"{Path(path).name} was filtered with the model whose weights have sha256 "
                        f"{problems.model_weights_sha256[:12]}…, not with {model_dir} ({model[:12]}…): restore the "
                        "shipped model, or draw a list for this one with `make tiny-model REFILTER=1`")
    if problems.config != dataclasses.asdict(config):
        raise UserError(f"{Path(path).name} was drawn with other filter settings than the code's TinyDataConfig: "
                        "draw it again with `make tiny-model REFILTER=1`")
    return problems


def dataset_stamp(path: Path = PROBLEMS_FILE) -> dict:
    """Return the record that ties the tiny parquets to the problem list and template that built them."""
    return {"problem_list_sha256": sha256_file(path), "template": TEMPLATE}


def ensure_datasets(model_dir: Path, train: str = TRAIN_RECIPE, val: tuple[str, ...] = (VAL_RECIPE,),
                    root: Path | None = None, config: TinyDataConfig = TinyDataConfig(),
                    path: Path = PROBLEMS_FILE) -> tuple[Path, list[Path]]:
    """Return (train parquet, [val parquet]) of the committed problem list, writing them when missing or stale;
    raise UserError when the list does not belong to ``model_dir`` and ``config``."""
    from precision_rl.data.recipes import Recipe, dataset_file, write_dataset
    from precision_rl.data.sources import Problem

    if train != TRAIN_RECIPE or tuple(val) != (VAL_RECIPE,):
        raise UserError(f"the tiny scale knows the datasets {TRAIN_RECIPE} and {VAL_RECIPE}, not {train} / {list(val)}")
    problems = checked_problem_list(model_dir, config, path)
    root = Path(root or data_root())
    train_path = dataset_file(root, TRAIN_RECIPE, "train", TEMPLATE)
    val_path = dataset_file(root, VAL_RECIPE, "test", TEMPLATE)
    stamp_path = train_path.parent / STAMP_FILE
    stamp = dataset_stamp(path)
    if train_path.is_file() and val_path.is_file() and stamp_path.is_file() and json.loads(stamp_path.read_text()) == stamp:
        return train_path, [val_path]
    provenance = {"generator": "precision_rl.tiny.problems", "problem_list": Path(path).name, **stamp,
                  "model_weights_sha256": problems.model_weights_sha256, "in_band": problems.in_band}

    def rows(entries, extra_keys):
        return [Problem(e["question"], e["answer"], {k: e[k] for k in extra_keys if k in e}) for e in entries]

    print(f"building {TRAIN_RECIPE} ({len(problems.train)} problems) and {VAL_RECIPE} ({len(problems.validation)}) "
          f"from {Path(path).name}", flush=True)
    write_dataset(Recipe(TRAIN_RECIPE, "Tiny sanity set: generated arithmetic filtered by the tiny model",
                         "train", TEMPLATE), rows(problems.train, ("success_rate", "ops")), provenance, root)
    write_dataset(Recipe(VAL_RECIPE, "Tiny validation set: held-out generated arithmetic (unfiltered)",
                         "test", TEMPLATE), rows(problems.validation, ("ops",)), provenance, root)
    atomic_write_text(stamp_path, json.dumps(stamp, indent=2))
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


def generated_problems(config: TinyDataConfig = TinyDataConfig()) -> tuple[list, list]:
    """Return (pool, held-out validation problems) of the generator, as ``ArithmeticProblem``s."""
    from precision_rl.tiny.problems import make_problems

    generated = make_problems(config.pool + config.val_problems, seed=config.seed, min_ops=config.min_ops,
                              max_ops=config.max_ops)
    return generated[: config.pool], generated[config.pool:]


def problem_list_doc(model_sha256: str, config: TinyDataConfig, pool: list, rates: list[float],
                     validation: list) -> dict:
    """Return the problem list document: the first ``config.max_train`` problems of ``pool`` whose success rate lies
    in the band, and the validation problems; raise UserError when the band holds too few."""
    in_band = [i for i, rate in enumerate(rates) if config.low - 1e-9 <= rate <= config.high + 1e-9]
    if len(in_band) < config.max_train:
        raise UserError(f"the tiny model solved only {len(in_band)} of {len(pool)} problems {config.low:.0%}-"
                        f"{config.high:.0%} of the time; the sanity set needs {config.max_train}")
    return {
        "about": "The tiny sanity set (train: the first max_train problems of the generated pool whose success rate "
                 "over k samples of the model with these weights, vLLM at T=1, lay in [low, high]) and its held-out "
                 "validation set (the next val_problems generated problems, unfiltered). Drawn by "
                 "`make tiny-model REFILTER=1`.",
        "model_weights_sha256": model_sha256, "config": dataclasses.asdict(config), "in_band": len(in_band),
        "train": [{"question": pool[i].question, "answer": pool[i].answer, "ops": len(pool[i].steps),
                   "pool_index": i, "success_rate": rates[i]} for i in in_band[: config.max_train]],
        "validation": [{"question": p.question, "answer": p.answer, "ops": len(p.steps)} for p in validation],
    }


def refilter(model_dir: Path, config: TinyDataConfig = TinyDataConfig(), path: Path = PROBLEMS_FILE) -> Path:
    """Run the filter over the generated pool with the model in ``model_dir`` and write the problem list (commit it
    to make it the instrument's); return its path."""
    from precision_rl.data.sources import Problem

    pool, validation = generated_problems(config)
    print(f"filtering {len(pool)} generated problems: {config.k} samples each, keeping {config.low:.0%}-"
          f"{config.high:.0%} success", flush=True)
    result = filter_pool(model_dir, [Problem(p.question, p.answer) for p in pool], config)
    doc = problem_list_doc(model_weights_sha256(model_dir), config, pool, list(result.rates), validation)
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    print(f"{Path(path).name}: {len(doc['train'])} training problems of {doc['in_band']} in the band, "
          f"{len(doc['validation'])} validation problems; commit it to make it the set", flush=True)
    return Path(path)
