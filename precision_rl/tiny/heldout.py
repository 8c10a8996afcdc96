"""Success rates of a tiny run's checkpoint at T=1, measured the way the sanity set was filtered.

verl's validation draws 4 answers per held-out problem at T=0.6. A policy sharpened by GRPO looks better or worse
there than its skill is, and the step-0 value of one model moves by ~0.03 with the sampling seed. This module
measures instead what the filter measured: ``TinyDataConfig.k`` answers per problem at T=1 with vLLM
(``data.filter_pool``), on the held-out problems and on the training problems, for the weights of a checkpoint and
for the shipped base beside it.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import shutil
import tempfile
from pathlib import Path

from precision_rl.data.sources import Problem
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_text, sha256_file
from precision_rl.tiny.data import PROBLEMS_FILE, TinyDataConfig, filter_pool, model_weights_sha256, read_problem_list
from precision_rl.tiny.shipped import CHECKSUMS_FILE, SHIPPED_DIR, WEIGHTS_FILE, verify, weights_sha256

# verl.utils.checkpoint.fsdp_checkpoint_manager.FSDPCheckpointManager.save_checkpoint (verl 0.9.1) writes the actor's
# state dict as <step dir>/actor/model_world_size_{world}_rank_{rank}.pt; a tiny run has one rank.
ACTOR_WEIGHTS = Path("actor") / "model_world_size_1_rank_0.pt"
STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
PROBLEM_SETS = ("validation", "train")  # the committed list's held-out problems, then its training problems
BASE = "base"
RECORDS_DIR = "heldout"  # inside a run directory (and the local analysis folder, for the base)


@dataclasses.dataclass(frozen=True)
class SetRates:
    """One model's success rates on one problem set: each problem's share of ``k`` answers graded right."""

    problem_set: str
    k: int
    rates: tuple[float, ...]

    @property
    def mean(self) -> float:
        """Return the mean success rate over the problems."""
        return sum(self.rates) / len(self.rates)

    @property
    def all_right(self) -> int:
        """Return how many problems had every answer right."""
        return sum(rate >= 1.0 for rate in self.rates)

    @property
    def none_right(self) -> int:
        """Return how many problems had no answer right."""
        return sum(rate <= 0.0 for rate in self.rates)


@dataclasses.dataclass(frozen=True)
class Change:
    """A model's mean success rate on one problem set minus the base's, with two standard errors: ``sampling_se``
    holds the problems fixed (the binomial error of ``k`` answers per problem, both models), ``problems_se`` treats
    them as a sample of such problems (the spread of the per-problem differences)."""

    problem_set: str
    difference: float
    sampling_se: float
    problems_se: float


def change_from_base(model: SetRates, base: SetRates) -> Change:
    """Return ``model``'s change against ``base`` on the same problem set, problem by problem; raise UserError when
    the two were measured on different sets or numbers of problems."""
    if (model.problem_set, len(model.rates)) != (base.problem_set, len(base.rates)):
        raise UserError(f"cannot compare {model.problem_set} ({len(model.rates)} problems) with the base's "
                        f"{base.problem_set} ({len(base.rates)} problems)")
    n = len(model.rates)
    diffs = [a - b for a, b in zip(model.rates, base.rates, strict=True)]
    mean = sum(diffs) / n
    # Unbiased variance of a success rate estimated from k answers: p(1 - p) / (k - 1).
    variance = sum(r * (1 - r) / (rates.k - 1) for rates in (model, base) for r in rates.rates if rates.k > 1)
    spread = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return Change(model.problem_set, mean, variance ** 0.5 / n, (spread / n) ** 0.5)


def checkpoint_steps(checkpoints: Path) -> list[int]:
    """Return the steps of ``checkpoints`` (a run's verl checkpoint folder) whose actor weights are on disk, sorted."""
    found = []
    for path in Path(checkpoints).glob("global_step_*"):
        match = STEP_DIR_RE.match(path.name)
        if match and (path / ACTOR_WEIGHTS).is_file():
            found.append(int(match.group(1)))
    return sorted(found)


def checkpoint_model(step_dir: Path, out_dir: Path, base_dir: Path = SHIPPED_DIR) -> Path:
    """Write the actor weights of the verl checkpoint ``step_dir`` as a model folder in fp32, with the base model's
    config and tokenizer; return ``out_dir``. Raise UserError when the weights are missing or do not fit the base.

    verl's own converter (``verl.model_merger``, 0.9.1) loads the model with ``torch_dtype=torch.bfloat16`` and so
    would round the fp32 master weights to bf16: a precision study cannot evaluate that copy.
    """
    import torch
    from transformers import AutoModelForCausalLM

    weights = Path(step_dir) / ACTOR_WEIGHTS
    if not weights.is_file():
        raise UserError(f"{weights} is missing: the checkpoint holds no actor weights (a run keeps its last "
                        "checkpoint's weights only)")
    try:
        state = torch.load(weights, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as exc:
        raise UserError(f"{weights}: not a readable checkpoint ({str(exc).splitlines()[0]})") from None
    state = {name: (t.full_tensor() if hasattr(t, "full_tensor") else t).float() for name, t in state.items()}
    model = AutoModelForCausalLM.from_pretrained(verify(base_dir), dtype=torch.float32)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise UserError(f"{weights} does not fit the tiny base model in {base_dir}: "
                        f"{str(exc).splitlines()[0]}") from None
    shutil.copytree(base_dir, out_dir, ignore=shutil.ignore_patterns(WEIGHTS_FILE, CHECKSUMS_FILE),
                    dirs_exist_ok=True)
    model.save_pretrained(out_dir)
    return Path(out_dir)


def measure(model_dir: Path, config: TinyDataConfig | None = None) -> list[SetRates]:
    """Return the success rates of the model in ``model_dir`` on each problem set of the committed list."""
    config = config or TinyDataConfig()
    problems = read_problem_list()
    sets = {name: [Problem(p["question"], p["answer"]) for p in getattr(problems, name)] for name in PROBLEM_SETS}
    rates = list(filter_pool(model_dir, [p for pool in sets.values() for p in pool], config).rates)
    out = []
    for name, pool in sets.items():
        out.append(SetRates(name, config.k, tuple(rates[:len(pool)])))
        rates = rates[len(pool):]
    return out


def _identity(config: TinyDataConfig) -> dict:
    """Return what a record's rates depend on besides the weights: the problem list and the sampling settings."""
    return {"problem_list_sha256": sha256_file(PROBLEMS_FILE), "config": dataclasses.asdict(config)}


def read_record(path: Path, config: TinyDataConfig | None = None) -> list[SetRates]:
    """Return the rates a record written by ``measured`` holds; raise UserError when it is unreadable or was measured
    on another problem list or with other settings."""
    config = config or TinyDataConfig()
    try:
        doc = json.loads(Path(path).read_text())
        sets = [SetRates(s["problem_set"], int(s["k"]), tuple(float(r) for r in s["rates"])) for s in doc["sets"]]
        identity = {key: doc[key] for key in _identity(config)}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a readable held-out record ({exc}); move it away to measure again") from None
    if identity != _identity(config):
        raise UserError(f"{path} was measured on another problem list or with other filter settings: move it away "
                        "to measure again")
    return sets


def model_name(step_dir: Path | None) -> str:
    """Return the name a record gives a model: ``base`` for the shipped base (None), ``step_<N>`` for the checkpoint
    folder ``global_step_<N>``."""
    if step_dir is None:
        return BASE
    match = STEP_DIR_RE.match(Path(step_dir).name)
    if not match:
        raise UserError(f"{step_dir} is not a verl checkpoint folder (global_step_<N>)")
    return f"step_{match.group(1)}"


def measured(record_dir: Path, step_dir: Path | None, config: TinyDataConfig | None = None) -> list[SetRates]:
    """Return the rates of the checkpoint in ``step_dir`` (None: the shipped base), measured once and kept in
    ``<record_dir>/<model name>.json`` (the base's name carries its weights' sha256), which later calls read
    instead."""
    config = config or TinyDataConfig()
    stem = model_name(step_dir) if step_dir is not None else f"{BASE}-{weights_sha256()[:12]}"
    record = Path(record_dir) / f"{stem}.json"
    if record.is_file():
        return read_record(record, config)
    with tempfile.TemporaryDirectory(prefix="precision_rl-heldout-") as tmp:
        model_dir = verify(SHIPPED_DIR) if step_dir is None else checkpoint_model(step_dir, Path(tmp) / "model")
        sets = measure(model_dir, config)
        doc = {"about": f"success rates at T=1 over {config.k} vLLM samples per problem "
                        "(precision_rl.tiny.heldout), one per problem of the committed list's set",
               "model": model_name(step_dir), "weights_sha256": model_weights_sha256(model_dir), **_identity(config),
               "sets": [dataclasses.asdict(s) for s in sets]}
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record, json.dumps(doc, indent=1) + "\n")
    return sets
