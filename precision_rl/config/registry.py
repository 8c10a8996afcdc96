"""The experiment registry: one YAML per experiment under experiments/, validated on load.

A file's path is its name (``experiments/sanity/grpo.yaml`` → ``sanity/grpo``). Files under ``experiments/_base/``
are shared bases that experiments ``extends``; they are not experiments themselves. Every error names the file
and the field.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from precision_rl.config import docs_refs
from precision_rl.config.algorithms import NEEDS_IS_THRESHOLD, check_algorithm
from precision_rl.config.precision import PRECISIONS, PrecisionArm
from precision_rl.config.scale import SCALES
from precision_rl.errors import SpecError, UserError
from precision_rl.paths import EXPERIMENTS_DIR
from precision_rl.reward.templates import TEMPLATES

BASE_DIR_NAME = "_base"
BACKENDS = ("fsdp", "megatron")
# A ``sources`` entry carrying this tag is the suite's assumption, not a published value.
ASSUMPTION_TAG = "[A]"


@dataclass(frozen=True)
class Hyper:
    """Every value in which an experiment differs from verl 0.9.1's defaults (None: verl's default stands).

    Batch sizes count prompts, as verl's do (``ppo_mini_batch_size`` is multiplied by ``rollout_n``).
    """

    train_batch_size: int | None = None
    gen_batch_size: int | None = None
    ppo_mini_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int | None = None
    use_dynamic_bsz: bool | None = None
    ppo_max_token_len_per_gpu: int | None = None
    ppo_epochs: int | None = None
    rollout_n: int | None = None
    max_prompt_length: int | None = None
    max_response_length: int | None = None
    filter_overlong_prompts: bool | None = None
    lr: float | None = None
    lr_warmup_steps: int | None = None
    lr_scheduler_type: str | None = None  # constant | cosine
    min_lr_ratio: float | None = None  # cosine's floor, as a fraction of lr
    weight_decay: float | None = None
    betas: tuple[float, float] | None = None
    eps: float | None = None
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float | None = None
    loss_agg_mode: str | None = None
    loss_scale_factor: float | None = None
    norm_adv_by_std: bool | None = None
    entropy_coeff: float | None = None
    temperature: float | None = None
    top_p: float | None = None
    val_temperature: float | None = None
    val_top_p: float | None = None
    val_n: int | None = None
    total_training_steps: int | None = None
    total_epochs: int | None = None
    test_freq: int | None = None
    save_freq: int | None = None
    max_checkpoints: int | None = None  # checkpoints kept on disk (trainer.max_actor_ckpt_to_keep)
    val_before_train: bool | None = None
    val_only: bool | None = None  # evaluate the model once (step 0) and stop: the evaluation-only experiments
    is_threshold: float | None = None
    filter_groups_metric: str | None = None
    overlong_buffer_len: int | None = None
    overlong_penalty_factor: float | None = None
    rollout_tensor_parallel: int | None = None
    gpu_memory_utilization: float | None = None
    megatron_tensor_parallel: int | None = None
    megatron_pipeline_parallel: int | None = None
    megatron_expert_parallel: int | None = None


HYPER_FIELDS = {f.name: f for f in dataclasses.fields(Hyper)}
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LR_SCHEDULES = ("constant", "cosine")  # verl 0.9.1 FSDP lr_scheduler_type; Megatron lr_decay_style takes both too


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapter settings (verl ``actor_rollout_ref.model.lora_rank/lora_alpha/target_modules``)."""

    rank: int
    alpha: float
    targets: str = "all-linear"


@dataclass(frozen=True)
class DataSpec:
    """Dataset recipe names: one training set and the validation sets (data/<name>/{train,test}.parquet)."""

    train: str
    val: tuple[str, ...]


@dataclass(frozen=True)
class Resources:
    """GPUs per node and nodes at paper scale."""

    gpus_per_node: int
    nnodes: int


@dataclass(frozen=True)
class PanelRef:
    """A figure panel an experiment feeds, optionally only through one precision arm (``fig3:bf16``)."""

    panel: str
    precision: str | None = None


@dataclass(frozen=True)
class ExperimentSpec:
    """One validated experiment at one scale."""

    name: str
    path: str
    scale: str
    description: str
    paper: tuple[PanelRef, ...]
    sources: dict[str, str]
    model: str
    template: str
    data: DataSpec
    algorithm: str
    arms: tuple[PrecisionArm, ...]
    backend: str
    lora: LoraSpec | None
    hyper: Hyper
    resources: Resources
    variant_of: str | None
    paper_backend: str  # the backend the paper scale runs on (a tiny stand-in may train on another)
    raw: dict[str, Any] = field(repr=False, compare=False)
    seeds: tuple[int, ...] = (0,)  # the seeds a whole grid runs (`make grid`); validate() sets DEFAULT_SEEDS

    @property
    def family(self) -> str:
        """Return the experiment's family: the folder it lives in (``sanity``, ``moe``, ...)."""
        return self.name.split("/")[0]

    def arm(self, label: str) -> PrecisionArm:
        """Return the arm called ``label``, or raise a UserError listing this experiment's arms."""
        for arm in self.arms:
            if arm.label == label:
                return arm
        raise UserError(f"experiment {self.name} has no precision arm {label!r}: it has {', '.join(self.arm_labels)}")

    @property
    def assumptions(self) -> list[str]:
        """Return the fields whose value is an assumption (source tagged ``[A]``), sorted; empty: fully sourced."""
        return sorted(key for key, text in self.sources.items() if ASSUMPTION_TAG in text)

    @property
    def arm_labels(self) -> list[str]:
        """Return the labels of this experiment's precision arms."""
        return [a.label for a in self.arms]


TOP_LEVEL_FIELDS = {
    "extends", "description", "paper", "sources", "model", "template", "data", "algorithm", "precision",
    "backend", "lora", "hyper", "resources", "variant_of", "scales", "seeds",
}
# The seed of a single run (SEED, --seed) and the seeds of a grid where an experiment names none.
DEFAULT_SEEDS = (42,)
REQUIRED_FIELDS = ("description", "model", "template", "data", "algorithm", "precision", "backend", "hyper", "resources")
TINY_FIELDS = {"model", "template", "data", "hyper", "resources", "lora", "backend", "seeds"}


def deep_merge(base: dict, over: dict) -> dict:
    """Return ``base`` updated by ``over``, merging nested mappings key by key (``over`` wins)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(path: Path, shown: str) -> dict:
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(shown, "<file>", f"not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(doc, dict):
        raise SpecError(shown, "<file>", "must be a mapping of fields")
    return doc


def load_raw(path: Path, root: Path = EXPERIMENTS_DIR, _seen: tuple[Path, ...] = ()) -> dict:
    """Return the experiment document at ``path`` with its ``extends`` chain merged in (bases first)."""
    shown = _shown(path, root)
    doc = _read_yaml(path, shown)
    parent = doc.pop("extends", None)
    if parent is None:
        return doc
    if not isinstance(parent, str):
        raise SpecError(shown, "extends", "must be a path relative to experiments/, e.g. _base/sanity.yaml")
    base_path = (root / parent).resolve()
    if not base_path.is_file():
        raise SpecError(shown, "extends", f"no such base file {parent!r} under {root.name}/")
    if base_path in _seen:
        raise SpecError(shown, "extends", "circular extends chain")
    return deep_merge(load_raw(base_path, root, _seen + (path.resolve(),)), doc)


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve().parent))
    except ValueError:
        return str(path)


def _coerce(value: Any, ftype: Any, shown: str, fname: str) -> Any:
    """Return ``value`` checked (and converted) against a Hyper field type, or raise SpecError."""
    text = str(ftype)
    if "bool" in text:
        if not isinstance(value, bool):
            raise SpecError(shown, fname, f"expected true or false, got {value!r}")
        return value
    if "tuple" in text:
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)):
            raise SpecError(shown, fname, f"expected a pair of numbers like [0.9, 0.95], got {value!r}")
        return tuple(float(v) for v in value)
    if "int" in text and "float" not in text:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(shown, fname, f"expected an integer, got {value!r}")
        return value
    if "float" in text:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise SpecError(shown, fname, f"expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(shown, fname, f"expected a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise SpecError(shown, fname, f"expected a string, got {value!r}")
    return value


def parse_hyper(raw: Any, shown: str, where: str = "hyper") -> Hyper:
    """Return the validated Hyper of a spec's ``hyper`` mapping."""
    if not isinstance(raw, dict):
        raise SpecError(shown, where, "must be a mapping")
    values = {}
    for key, value in raw.items():
        if key not in HYPER_FIELDS:
            raise SpecError(shown, f"{where}.{key}", f"unknown field (known: {', '.join(sorted(HYPER_FIELDS))})")
        if value is None:
            continue
        values[key] = _coerce(value, HYPER_FIELDS[key].type, shown, f"{where}.{key}")
    hyper = Hyper(**values)
    if hyper.loss_agg_mode is not None and hyper.loss_agg_mode not in LOSS_AGG_MODES:
        raise SpecError(shown, f"{where}.loss_agg_mode", f"must be one of {', '.join(LOSS_AGG_MODES)}")
    if hyper.lr_scheduler_type is not None and hyper.lr_scheduler_type not in LR_SCHEDULES:
        raise SpecError(shown, f"{where}.lr_scheduler_type", f"must be one of {', '.join(LR_SCHEDULES)}")
    return hyper


def _parse_arms(raw: Any, shown: str) -> tuple[PrecisionArm, ...]:
    def name(v: Any, f: str) -> str:
        if v not in PRECISIONS:
            raise SpecError(shown, f, f"unknown precision {v!r} (choose {', '.join(PRECISIONS)})")
        return v

    arms: list[PrecisionArm] = []
    if isinstance(raw, dict):
        if set(raw) != {"train", "infer"} or not all(isinstance(raw[k], list) and raw[k] for k in raw):
            raise SpecError(shown, "precision", "a grid must be {train: [...], infer: [...]}")
        arms = [PrecisionArm(name(t, "precision.train"), name(i, "precision.infer"))
                for t in raw["train"] for i in raw["infer"]]
    elif isinstance(raw, list) and raw:
        for k, item in enumerate(raw):
            if isinstance(item, str):
                arms.append(PrecisionArm(name(item, f"precision[{k}]"), item))
            elif isinstance(item, dict) and set(item) == {"train", "infer"}:
                arms.append(PrecisionArm(name(item["train"], f"precision[{k}].train"),
                                         name(item["infer"], f"precision[{k}].infer")))
            else:
                raise SpecError(shown, f"precision[{k}]", "must be a precision name or {train: ..., infer: ...}")
    else:
        raise SpecError(shown, "precision", "must be a non-empty list of arms or a {train, infer} grid")
    labels = [a.label for a in arms]
    if len(set(labels)) != len(labels):
        raise SpecError(shown, "precision", f"repeated arms in {labels}")
    return tuple(arms)


def _parse_paper(raw: Any, shown: str) -> tuple[PanelRef, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise SpecError(shown, "paper", "must be a list of panel names like fig1a or fig3:bf16")
    out = []
    for item in raw:
        panel, _, prec = item.partition(":")
        if prec and prec not in PRECISIONS:
            raise SpecError(shown, "paper", f"panel {item!r} names unknown precision {prec!r}")
        out.append(PanelRef(panel, prec or None))
    return tuple(out)


def _require_str(doc: dict, key: str, shown: str, choices: tuple[str, ...] | None = None) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise SpecError(shown, key, "must be a non-empty string")
    if choices and value not in choices:
        raise SpecError(shown, key, f"unknown value {value!r} (choose {', '.join(choices)})")
    return value


def _parse_data(raw: Any, shown: str) -> DataSpec:
    if not isinstance(raw, dict) or set(raw) - {"train", "val"} or "train" not in raw:
        raise SpecError(shown, "data", "must be {train: <recipe>, val: [<recipe>, ...]}")
    val = raw.get("val") or []
    if not isinstance(raw["train"], str) or not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise SpecError(shown, "data", "train must be a recipe name and val a list of recipe names")
    return DataSpec(raw["train"], tuple(val))


def _parse_lora(raw: Any, shown: str) -> LoraSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"rank", "alpha", "targets"} or not {"rank", "alpha"} <= set(raw):
        raise SpecError(shown, "lora", "must be {rank: int, alpha: number, targets: all-linear}")
    if not isinstance(raw["rank"], int) or raw["rank"] <= 0:
        raise SpecError(shown, "lora.rank", "must be a positive integer")
    return LoraSpec(raw["rank"], float(raw["alpha"]), str(raw.get("targets", "all-linear")))


def _parse_resources(raw: Any, shown: str) -> Resources:
    if not isinstance(raw, dict) or set(raw) != {"gpus_per_node", "nnodes"}:
        raise SpecError(shown, "resources", "must be {gpus_per_node: int, nnodes: int}")
    for key in raw:
        if not isinstance(raw[key], int) or raw[key] <= 0:
            raise SpecError(shown, f"resources.{key}", "must be a positive integer")
    return Resources(raw["gpus_per_node"], raw["nnodes"])


def _parse_seeds(raw: Any, shown: str) -> tuple[int, ...]:
    if raw is None:
        return DEFAULT_SEEDS
    if (not isinstance(raw, list) or not raw or len(set(raw)) != len(raw)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw)):
        raise SpecError(shown, "seeds", "must be a list of distinct non-negative integers")
    return tuple(raw)


def _check_sources(doc: dict, shown: str) -> dict[str, str]:
    sources = doc.get("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) and v for v in sources.values()):
        raise SpecError(shown, "sources", "must map each field (e.g. hyper.lr) to where its value comes from")
    needed = ["model", "algorithm"] + [f"hyper.{k}" for k, v in doc["hyper"].items() if v is not None]
    if doc.get("lora") is not None:
        needed.append("lora")
    for key in needed:
        if key not in sources:
            raise SpecError(shown, f"sources.{key}", "missing: every value that differs from verl's defaults "
                            "must say where it comes from")
    for key, text in sources.items():
        if not docs_refs.references(text):
            raise SpecError(shown, f"sources.{key}", "must cite a section of the project's docs as "
                            "docs/<file>.md#<section>")
        if missing := docs_refs.unresolved(text):
            raise SpecError(shown, f"sources.{key}", f"cites {', '.join(missing)}, which is not a heading under docs/")
    return dict(sources)


def validate(doc: dict, name: str, shown: str, scale: str) -> ExperimentSpec:
    """Return the ExperimentSpec of a merged experiment document at ``scale``, or raise SpecError."""
    unknown = set(doc) - TOP_LEVEL_FIELDS
    if unknown:
        raise SpecError(shown, sorted(unknown)[0], f"unknown field (known: {', '.join(sorted(TOP_LEVEL_FIELDS))})")
    for key in REQUIRED_FIELDS:
        if doc.get(key) is None:
            raise SpecError(shown, key, "missing")
    scales = doc.get("scales") or {}
    if not isinstance(scales, dict) or set(scales) - set(SCALES):
        raise SpecError(shown, "scales", f"must map scale names ({', '.join(SCALES)}) to overrides")
    tiny = scales.get("tiny") or {}
    if not isinstance(tiny, dict) or set(tiny) - TINY_FIELDS:
        raise SpecError(shown, "scales.tiny", f"may only set {', '.join(sorted(TINY_FIELDS))}")
    if "hyper" in tiny:
        parse_hyper(tiny["hyper"], shown, "scales.tiny.hyper")
    parse_hyper(doc["hyper"], shown)
    sources = _check_sources(doc, shown)
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r}: choose one of {', '.join(SCALES)}")
    eff = deep_merge(doc, {k: v for k, v in (scales.get(scale) or {}).items() if k != "tiny"})
    try:
        algorithm = check_algorithm(eff["algorithm"])
    except UserError as exc:
        raise SpecError(shown, "algorithm", str(exc)) from None
    hyper = parse_hyper(eff["hyper"], shown)
    if hyper.val_only and hyper.val_before_train is False:
        raise SpecError(shown, "hyper.val_only", "an evaluation-only run is verl's validation before training: "
                        "val_before_train must not be false (verl would train instead)")
    if algorithm in NEEDS_IS_THRESHOLD and hyper.is_threshold is None:
        raise SpecError(shown, "hyper.is_threshold", f"algorithm {algorithm} needs the importance-ratio cap C")
    variant_of = doc.get("variant_of")
    if variant_of is not None and not isinstance(variant_of, str):
        raise SpecError(shown, "variant_of", "must be an experiment name")
    description = _require_str(doc, "description", shown)
    return ExperimentSpec(
        name=name, path=shown, scale=scale, description=description.strip(),
        paper=_parse_paper(doc.get("paper"), shown), sources=sources,
        model=_require_str(eff, "model", shown), template=_require_str(eff, "template", shown, tuple(TEMPLATES)),
        data=_parse_data(eff["data"], shown), algorithm=algorithm, arms=_parse_arms(eff["precision"], shown),
        backend=_require_str(eff, "backend", shown, BACKENDS), lora=_parse_lora(eff.get("lora"), shown),
        hyper=hyper, resources=_parse_resources(eff["resources"], shown), variant_of=variant_of,
        paper_backend=_require_str(doc, "backend", shown, BACKENDS), raw=eff,
        seeds=_parse_seeds(eff.get("seeds"), shown),
    )


def experiment_files(root: Path = EXPERIMENTS_DIR) -> dict[str, Path]:
    """Return every experiment name → file under ``root`` (bases excluded), sorted by name."""
    files = {}
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root)
        if rel.parts[0] == BASE_DIR_NAME:
            continue
        files[rel.with_suffix("").as_posix()] = path
    return files


def load_experiment(name: str, scale: str = "paper", root: Path = EXPERIMENTS_DIR) -> ExperimentSpec:
    """Return the validated spec of experiment ``name`` at ``scale``; unknown names raise a UserError."""
    files = experiment_files(root)
    if name not in files:
        import difflib

        close = difflib.get_close_matches(name, list(files), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see `make list`)"
        raise UserError(f"unknown experiment {name!r}{hint}")
    path = files[name]
    return validate(load_raw(path, root), name, _shown(path, root), scale)


def load_all(scale: str = "paper", root: Path = EXPERIMENTS_DIR) -> dict[str, ExperimentSpec]:
    """Return every experiment of the registry, validated at ``scale``."""
    return {name: load_experiment(name, scale, root) for name in experiment_files(root)}


def select(patterns: list[str], scale: str = "paper", root: Path = EXPERIMENTS_DIR) -> list[ExperimentSpec]:
    """Return the experiments matching ``patterns`` (names or fnmatch globs like ``sanity/*``), in registry order."""
    import fnmatch

    names = list(experiment_files(root))
    chosen: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            load_experiment(pattern, scale, root)  # raises the clear "unknown experiment" error
        chosen += [h for h in hits if h not in chosen]
    return [load_experiment(n, scale, root) for n in chosen]
