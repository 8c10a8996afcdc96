"""The experiment registry: one YAML per experiment under experiments/, validated on load.

A file's path is its name (``experiments/sanity/grpo.yaml`` → ``sanity/grpo``). Files under ``experiments/_base/``
are shared bases that experiments ``extends``; they are not experiments themselves. The pydantic dataclasses below
are the schema of a document; every error names the file and the field.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError
from pydantic import StrictBool as Bool
from pydantic import StrictInt as Int
from pydantic import StrictStr as Str
from pydantic.dataclasses import dataclass

from precision_rl.config import docs_refs
from precision_rl.config.algorithms import ALGORITHMS, NEEDS_IS_THRESHOLD
from precision_rl.config.precision import PRECISIONS, ROLLOUT_FORMATS, PrecisionArm, paper_scale_refusal
from precision_rl.config.scale import PAPER, SCALES
from precision_rl.errors import SpecError, UserError
from precision_rl.paths import EXPERIMENTS_DIR
from precision_rl.reward.grader import DEFAULT_GRADER, GRADERS
from precision_rl.reward.templates import TEMPLATES

BASE_DIR_NAME = "_base"
# The calibrated instrument: the paper's sanity test, the experiment `make sanity-fp16` and `make sanity-bf16` run.
INSTRUMENT_EXPERIMENT = "sanity/grpo"
BACKENDS = ("fsdp", "megatron")
# A ``sources`` entry carrying this tag is the suite's assumption, not a published value.
ASSUMPTION_TAG = "[A]"
# A ``sources`` entry carrying this tag has sources that disagree; it names how the other value runs:
# "runs as variant <experiment>" or "runs as EXTRA='<verl override>'" (docs/sources.md#conflicts).
CONFLICT_TAG = "[C]"
# The ``sources`` key under which an experiment says where its reward settings come from.
REWARD_SOURCE_KEY = "reward"
_RUNS_AS = re.compile(r"runs as (?:variant (?P<variant>[\w/.-]+)|EXTRA='(?P<extra>[^']+)')")
# The seed of a single run (SEED, --seed) and the seeds of a grid where an experiment names none.
DEFAULT_SEEDS = (42,)
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LR_SCHEDULES = ("constant", "cosine")  # verl 0.9.1 FSDP lr_scheduler_type; Megatron lr_decay_style takes both too


def _number(value: Any) -> Any:
    """Return a numeric string as a float (YAML reads ``1e-6`` as text), anything else unchanged."""
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def _distinct(items: tuple) -> tuple:
    """Return ``items`` if no entry repeats, else raise ValueError listing them."""
    if len(set(items)) != len(items):
        raise ValueError(f"repeated entries in {[getattr(x, 'label', x) for x in items]}")
    return items


Number = Annotated[float, Strict(), BeforeValidator(_number)]
Text = Annotated[Str, Field(min_length=1)]
Positive = Annotated[Int, Field(gt=0)]
Precision = Literal[PRECISIONS]
RolloutFormat = Literal[ROLLOUT_FORMATS]
Seeds = Annotated[tuple[Annotated[Int, Field(ge=0)], ...], Field(min_length=1), AfterValidator(_distinct)]
_CONFIG = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_CONFIG)
class Hyper:
    """Every value in which an experiment differs from verl 0.9.1's defaults (None: verl's default stands).

    Each field says what it is; the verl key(s) it renders to are derived from the launcher's rendering and listed in
    docs/fields.md (``python -m precision_rl fields``). Batch sizes count prompts, as verl's do
    (``ppo_mini_batch_size`` is multiplied by ``rollout_n``).
    """

    train_batch_size: Int | None = Field(None, description="prompts per training step")
    gen_batch_size: Int | None = Field(None, description="DAPO: prompts generated at once before filtering groups")
    ppo_mini_batch_size: Int | None = Field(
        None, description="prompts per optimizer update (a step makes train_batch_size / this updates)")
    ppo_micro_batch_size_per_gpu: Int | None = Field(
        None, description="samples per forward/backward pass on one GPU (memory only)")
    use_dynamic_bsz: Bool | None = Field(
        None, description="pack micro-batches by token count instead of sample count (memory and speed only)")
    ppo_max_token_len_per_gpu: Int | None = Field(
        None, description="token budget of a packed micro-batch (with use_dynamic_bsz)")
    ppo_epochs: Int | None = Field(None, description="passes over each rollout batch")
    rollout_n: Int | None = Field(None, description="samples per prompt (the GRPO group)")
    max_prompt_length: Int | None = Field(None, description="prompt tokens at most")
    max_response_length: Int | None = Field(None, description="generated tokens at most per sample")
    filter_overlong_prompts: Bool | None = Field(
        None, description="drop prompts longer than max_prompt_length instead of truncating them")
    lr: Number | None = Field(None, description="actor learning rate")
    lr_warmup_steps: Int | None = Field(None, description="steps of linear learning-rate warm-up")
    lr_scheduler_type: Literal[LR_SCHEDULES] | None = Field(
        None, description="learning-rate schedule after warm-up: constant or cosine")
    min_lr_ratio: Number | None = Field(None, description="cosine's floor as a fraction of lr")
    weight_decay: Number | None = Field(None, description="AdamW weight decay")
    betas: tuple[Number, Number] | None = Field(None, description="Adam betas (beta1, beta2)")
    eps: Number | None = Field(None, description="Adam epsilon")
    clip_ratio_low: Number | None = Field(None, description="PPO clip below 1 (ratio >= 1 - this)")
    clip_ratio_high: Number | None = Field(
        None, description="PPO clip above 1 (ratio <= 1 + this; clip-higher when larger than the low one)")
    clip_ratio_c: Number | None = Field(
        None, description="dual-clip constant capping the loss of negative-advantage tokens")
    loss_agg_mode: Literal[LOSS_AGG_MODES] | None = Field(
        None, description="how token losses aggregate into the batch loss")
    loss_scale_factor: Number | None = Field(
        None, description="the constant that seq-mean-token-sum-norm divides each sequence's token sum by (Dr.GRPO)")
    norm_adv_by_std: Bool | None = Field(None, description="divide GRPO advantages by the group's standard deviation")
    entropy_coeff: Number | None = Field(None, description="weight of the entropy bonus in the actor loss")
    temperature: Number | None = Field(None, description="sampling temperature of training rollouts")
    top_p: Number | None = Field(None, description="nucleus sampling of training rollouts")
    val_temperature: Number | None = Field(None, description="sampling temperature of validation (0: greedy)")
    val_top_p: Number | None = Field(None, description="nucleus sampling of validation")
    val_n: Int | None = Field(None, description="samples per validation problem (the n of mean@n)")
    total_training_steps: Int | None = Field(None, description="training steps of a run")
    total_epochs: Int | None = Field(None, description="passes over the training set at most")
    test_freq: Int | None = Field(None, description="validate every this many steps")
    save_freq: Int | None = Field(
        None, description="checkpoint every this many steps (RESUME=1 continues from the newest)")
    max_checkpoints: Int | None = Field(None, description="checkpoints kept on disk")
    val_before_train: Bool | None = Field(None, description="validate once before the first step (the step-0 point)")
    val_only: Bool | None = Field(None, description="validate once (step 0) and stop: the evaluation-only experiments")
    is_threshold: Number | None = Field(None, description="the importance-ratio cap C of the IS/MIS algorithms")
    filter_groups_metric: Str | None = Field(None, description="DAPO: the metric whose all-equal groups are dropped")
    overlong_buffer_len: Int | None = Field(
        None, description="DAPO: tokens before max_response_length where the over-long penalty starts")
    overlong_penalty_factor: Number | None = Field(
        None, description="DAPO: the over-long penalty at max_response_length")
    rollout_logit_noise: Annotated[Number, Field(ge=0)] | None = Field(
        None, description="synthetic mismatch (tiny scale): standard deviation of the seeded Gaussian noise added to "
        "every rollout logit before sampling")
    logit_noise_in_trainer: Bool | None = Field(
        None, description="the synthetic rung's control: the trainer's logits carry the same noise (no mismatch)")
    rollout_tensor_parallel: Int | None = Field(None, description="vLLM tensor-parallel size")
    gpu_memory_utilization: Number | None = Field(None, description="share of GPU memory vLLM may take")
    megatron_tensor_parallel: Int | None = Field(None, description="Megatron tensor-parallel size")
    megatron_pipeline_parallel: Int | None = Field(None, description="Megatron pipeline-parallel size")
    megatron_expert_parallel: Int | None = Field(None, description="Megatron expert-parallel size")


HYPER_FIELDS = tuple(f.name for f in dataclasses.fields(Hyper))


@dataclass(frozen=True, config=_CONFIG)
class LoraSpec:
    """LoRA adapter settings (verl ``actor_rollout_ref.model.lora_rank/lora_alpha/target_modules``)."""

    rank: Positive
    alpha: Number
    targets: Str = "all-linear"


@dataclass(frozen=True, config=_CONFIG)
class DataSpec:
    """Dataset recipe names: one training set and the validation sets (data/<name>/{train,test}.parquet)."""

    train: Text
    val: tuple[Text, ...] = ()


@dataclass(frozen=True, config=_CONFIG)
class Resources:
    """GPUs per node and nodes at paper scale."""

    gpus_per_node: Positive
    nnodes: Positive


@dataclass(frozen=True, config=_CONFIG)
class PanelRef:
    """A figure panel an experiment feeds, optionally only through one precision arm (``fig3:bf16``)."""

    panel: Text
    precision: Precision | None = None


def _panel(value: Any) -> dict:
    """Return the fields of a panel name like ``fig3:bf16``, or raise ValueError."""
    if not isinstance(value, str):
        raise ValueError("must be a panel name like fig1a or fig3:bf16")
    panel, _, precision = value.partition(":")
    return {"panel": panel, "precision": precision or None}


@dataclass(frozen=True, config=_CONFIG)
class _Arm:
    train: Precision
    infer: RolloutFormat


def _arm(value: Any) -> Any:
    """Return a precision name as its {train, infer} pair, a mapping unchanged; anything else raises ValueError."""
    if isinstance(value, dict):
        return value
    if value not in PRECISIONS:
        raise ValueError(f"unknown precision {value!r}: choose {', '.join(PRECISIONS)} or {{train: ..., infer: ...}}")
    return {"train": value, "infer": value}


def _grid(value: Any) -> Any:
    """Return a {train: [...], infer: [...]} grid as its list of pairs, anything else unchanged."""
    if not isinstance(value, dict):
        return value
    if set(value) != {"train", "infer"} or not all(isinstance(v, list) and v for v in value.values()):
        raise ValueError("a grid must be {train: [...], infer: [...]}")
    return [{"train": t, "infer": i} for t in value["train"] for i in value["infer"]]


Arm = Annotated[_Arm, BeforeValidator(_arm), AfterValidator(lambda a: PrecisionArm(a.train, a.infer))]
Arms = Annotated[tuple[Arm, ...], BeforeValidator(_grid), Field(min_length=1), AfterValidator(_distinct)]


@dataclass(frozen=True, config=_CONFIG)
class _Tiny:
    """What ``scales.tiny`` or a paper-scale profile (``profiles.<name>``) may set: checked as part of the document
    where it applies, ``hyper`` everywhere."""

    model: Any = None
    template: Any = None
    data: Any = None
    hyper: Hyper | None = None
    resources: Any = None
    lora: Any = None
    backend: Any = None
    seeds: Any = None
    quick_steps: Any = None
    quick_save_freq: Any = None


@dataclass(frozen=True, config=_CONFIG)
class _Scales:
    paper: dict[str, Any] | None = None
    tiny: _Tiny | None = None


@dataclass(frozen=True, config=_CONFIG)
class _Document:
    """An experiment document (its ``extends`` chain merged), with null fields left out."""

    description: Text
    model: Text
    template: Literal[tuple(TEMPLATES)]
    data: DataSpec
    algorithm: Literal[ALGORITHMS]
    precision: Arms
    backend: Literal[BACKENDS]
    hyper: Hyper
    resources: Resources
    paper: tuple[Annotated[PanelRef, BeforeValidator(_panel)], ...] = ()
    sources: Any = None
    lora: LoraSpec | None = None
    variant_of: Str | None = None
    seeds: Seeds = DEFAULT_SEEDS
    scales: _Scales | None = None
    # Paper-scale profiles (config/profiles.py): what each changes in the paper-scale document.
    profiles: dict[str, _Tiny] | None = None
    extends: Str | None = None
    grader: Literal[tuple(GRADERS)] = DEFAULT_GRADER  # the reward's answer checker (precision_rl.reward.grader)
    # The quick profile stops after this many steps of the experiment's schedule (config/profiles.py); unset: the
    # quick profile is the whole run.
    quick_steps: Annotated[Int, Field(ge=1)] | None = None
    # The quick profile checkpoints every this many steps (RESUME=1 continues from the newest); unset: as
    # hyper.save_freq.
    quick_save_freq: Annotated[Int, Field(ge=1)] | None = None


_DOCUMENT = TypeAdapter(_Document)
_SECTIONS = {"hyper": Hyper, "lora": LoraSpec, "data": DataSpec, "resources": Resources, "scales": _Scales,
             "tiny": _Tiny}


@dataclasses.dataclass(frozen=True)
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
    grader: str  # the reward's answer checker: a name of precision_rl.reward.grader.GRADERS
    data: DataSpec
    algorithm: str
    arms: tuple[PrecisionArm, ...]
    backend: str
    lora: LoraSpec | None
    hyper: Hyper
    resources: Resources
    variant_of: str | None
    paper_backend: str  # the backend the paper scale runs on (a tiny stand-in may train on another)
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)
    seeds: tuple[int, ...] = (0,)  # the seeds a whole grid runs (`make grid`); validate() sets DEFAULT_SEEDS
    quick_steps: int | None = None  # where the quick profile stops (config/profiles.py); None: the whole run
    quick_save_freq: int | None = None  # the quick profile's checkpoint frequency; None: hyper.save_freq

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
    def reward_assumed(self) -> bool:
        """Return whether the reward settings are the suite's assumption (no published reward): the run's absolute
        reward and accuracy levels are then not comparable with the paper's, only the arms' difference."""
        return REWARD_SOURCE_KEY in self.assumptions

    @property
    def conflicts(self) -> dict[str, tuple[str, str]]:
        """Return field → how its other value runs, ``("variant", name)`` or ``("extra", override)``, for every
        field whose sources disagree (tagged ``[C]``)."""
        return {key: alternative for key, text in sorted(self.sources.items())
                if (alternative := conflict_alternative(text)) is not None}

    def panel_arms(self, panel: str) -> list[PrecisionArm]:
        """Return the arms feeding figure ``panel`` (none when the experiment does not name it; ``fig3:bf16``: bf16)."""
        refs = [r for r in self.paper if r.panel == panel]
        return [a for a in self.arms if any(r.precision is None or a.train == a.infer == r.precision for r in refs)]

    def noise_refusal(self) -> str | None:
        """Return why the paper scale cannot run this experiment's synthetic logit noise, or None without noise."""
        if not self.hyper.rollout_logit_noise:
            return None
        return "the synthetic logit noise runs at tiny scale only (no GPU run of it was ever checked)"

    def runs_at_tiny_scale_only(self, arm: PrecisionArm) -> bool:
        """Return True when the paper scale refuses ``arm`` before composing it: a rollout format verl 0.9.1 does not
        quantize to (``paper_scale_refusal``), or the synthetic logit noise (``noise_refusal``)."""
        return self.noise_refusal() is not None or paper_scale_refusal(arm) is not None

    @property
    def scale_arms(self) -> tuple[PrecisionArm, ...]:
        """Return the arms that run at this spec's scale: every arm at tiny scale, those the paper scale does not
        refuse there."""
        return tuple(a for a in self.arms if self.scale != PAPER or not self.runs_at_tiny_scale_only(a))

    @property
    def arm_labels(self) -> list[str]:
        """Return the labels of this experiment's precision arms."""
        return [a.label for a in self.arms]


LADDER_PANEL = "ladder"  # the mismatch ladder's dose–response panel: every rung of experiments/ladder/ names it


def conflict_alternative(source: str) -> tuple[str, str] | None:
    """Return how the other value of a ``[C]`` sources entry runs, ``("variant", name)`` or ``("extra",
    override)``; None for an entry without the tag. Raise ValueError for a tagged entry that names neither."""
    if CONFLICT_TAG not in source:
        return None
    match = _RUNS_AS.search(source)
    if match is None:
        raise ValueError(f"tagged {CONFLICT_TAG} but names no way to run the other value: add \"runs as variant "
                         "<experiment>\" or \"runs as EXTRA='<verl override>'\"")
    return ("variant", match["variant"]) if match["variant"] else ("extra", match["extra"])


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


def _parse(doc: dict, shown: str) -> _Document:
    """Return ``doc`` validated against the schema, or raise a SpecError naming its first error's field."""
    try:
        return _DOCUMENT.validate_python({k: v for k, v in doc.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
    loc = err["loc"]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    if err["type"] == "missing":
        problem = "missing"
    elif err["type"] == "unexpected_keyword_argument":
        known = dataclasses.fields(_SECTIONS.get(loc[-2], _Arm) if len(loc) > 1 else _Document)
        problem = f"unknown field (known: {', '.join(sorted(f.name for f in known))})"
    elif err["type"] == "value_error":
        problem = str(err["ctx"]["error"])
    else:
        problem = f"{err['msg']}, got {err['input']!r}"
    raise SpecError(shown, where, problem)


def _check_sources(doc: dict, shown: str) -> dict[str, str]:
    sources = doc.get("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) and v for v in sources.values()):
        raise SpecError(shown, "sources", "must map each field (e.g. hyper.lr) to where its value comes from")
    needed = ["model", "algorithm"] + [f"hyper.{k}" for k, v in doc["hyper"].items() if v is not None]
    if doc.get("grader") is not None:
        needed.append("grader")
    if doc.get("lora") is not None:
        needed.append("lora")
    for key in needed:
        if key not in sources:
            raise SpecError(shown, f"sources.{key}", "missing: every value that differs from verl's defaults "
                            "must say where it comes from")
    for key, text in sources.items():
        try:
            conflict_alternative(text)
        except ValueError as exc:
            raise SpecError(shown, f"sources.{key}", str(exc)) from None
        if not docs_refs.references(text):
            raise SpecError(shown, f"sources.{key}", "must cite a section of the project's docs as "
                            "docs/<file>.md#<section>")
    return dict(sources)


def validate(doc: dict, name: str, shown: str, scale: str, profile: str | None = None) -> ExperimentSpec:
    """Return the ExperimentSpec of a merged experiment document at ``scale``, changed by its paper-scale ``profile``
    (``profiles.<name>``; None: none), or raise SpecError (UserError for a profile the experiment lacks)."""
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r}: choose one of {', '.join(SCALES)}")
    top = _parse(doc, shown)
    sources = _check_sources(doc, shown)
    eff = deep_merge(doc, (doc.get("scales") or {}).get(scale) or {})
    if profile is not None:
        if scale != PAPER or profile not in (doc.get("profiles") or {}):
            have = ", ".join(sorted(doc.get("profiles") or {})) or "none"
            raise UserError(f"experiment {name} has no {profile} profile at {scale} scale (its paper-scale profiles: "
                            f"{have})")
        eff = deep_merge(eff, doc["profiles"][profile])
    run = _parse(eff, shown)
    if run.hyper.val_only and run.hyper.val_before_train is False:
        raise SpecError(shown, "hyper.val_only", "an evaluation-only run is verl's validation before training: "
                        "val_before_train must not be false (verl would train instead)")
    if run.algorithm in NEEDS_IS_THRESHOLD and run.hyper.is_threshold is None:
        raise SpecError(shown, "hyper.is_threshold", f"algorithm {run.algorithm} needs the importance-ratio cap C")
    total = run.hyper.total_training_steps
    if run.quick_steps is not None and total is not None and run.quick_steps >= total:
        raise SpecError(shown, f"scales.{scale}.quick_steps", f"the quick profile must stop before the run's "
                        f"{total} steps, got {run.quick_steps}")
    if run.quick_save_freq is not None and (run.quick_steps is None or run.quick_steps % run.quick_save_freq):
        raise SpecError(shown, f"scales.{scale}.quick_save_freq", "must divide quick_steps, so that the quick "
                        f"profile's last step is checkpointed (quick_steps {run.quick_steps}, got "
                        f"{run.quick_save_freq})")
    return ExperimentSpec(
        name=name, path=shown, scale=scale, description=top.description.strip(), paper=top.paper, sources=sources,
        model=run.model, template=run.template, grader=run.grader, data=run.data, algorithm=run.algorithm,
        arms=run.precision, backend=run.backend, lora=run.lora, hyper=run.hyper, resources=run.resources,
        variant_of=top.variant_of, paper_backend=top.backend, raw=eff, seeds=run.seeds, quick_steps=run.quick_steps,
        quick_save_freq=run.quick_save_freq,
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


def load_experiment(name: str, scale: str = PAPER, root: Path = EXPERIMENTS_DIR,
                    profile: str | None = None) -> ExperimentSpec:
    """Return the validated spec of experiment ``name`` at ``scale`` (changed by its paper-scale ``profile``, if
    given); unknown names raise a UserError."""
    files = experiment_files(root)
    if name not in files:
        import difflib

        close = difflib.get_close_matches(name, list(files), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see `make list`)"
        raise UserError(f"unknown experiment {name!r}{hint}")
    path = files[name]
    return validate(load_raw(path, root), name, _shown(path, root), scale, profile)


def load_all(scale: str = PAPER, root: Path = EXPERIMENTS_DIR) -> dict[str, ExperimentSpec]:
    """Return every experiment of the registry, validated at ``scale``."""
    return {name: load_experiment(name, scale, root) for name in experiment_files(root)}


def select(patterns: list[str], scale: str = PAPER, root: Path = EXPERIMENTS_DIR,
           profile: str | None = None) -> list[ExperimentSpec]:
    """Return the experiments matching ``patterns`` (names or fnmatch globs like ``sanity/*``), in registry order,
    each changed by its paper-scale ``profile`` if given."""
    import fnmatch

    names = list(experiment_files(root))
    chosen: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            load_experiment(pattern, scale, root)  # raises the clear "unknown experiment" error
        chosen += [h for h in hits if h not in chosen]
    return [load_experiment(n, scale, root, profile) for n in chosen]
