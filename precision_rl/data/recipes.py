"""Dataset recipes: every dataset the registry names, written as verl parquet under ``launch.data_root()``.

A recipe reads its problems from ``--source`` if given, else the shared local copy, else the HF hub, and writes
``<root>/<name>/{train|test}.parquet`` (prompts in the recipe's default template), one ``<name>_example.json`` and a
``MANIFEST.json`` entry. Experiments that prompt with another template get ``<root>/<name>/<template>/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_rl.data.sources import HubSource, Loaded, Problem, load_hub, load_local
from precision_rl.data.store import (
    commit_files,
    dataset_dir,
    make_row,
    update_manifest,
    write_parquet_tmp,
    write_text_tmp,
)
from precision_rl.errors import UserError
from precision_rl.fileio import sha256_file
from precision_rl.paths import shared_data_dir
from precision_rl.reward.templates import get_template


@dataclass(frozen=True)
class Recipe:
    """How to obtain one dataset: its split, default template, local copy, hub copy, and expected size."""

    name: str
    description: str
    split: str  # "train" (training sets) or "test" (evaluation sets)
    template: str
    local: str | None = None  # path under the shared data folder
    local_split: str | None = None  # split inside that copy
    hub: HubSource | None = None
    expected_rows: int | None = None
    licence: str = "see the source"
    dedupe: bool = False
    explicit_only: bool = False  # built only when named (expensive: samples a model)


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("sanity", "The paper's 1,460-problem sanity set for R1-Distill-Qwen-1.5B (MATH, 20-80% success)",
           "train", "r1_distill_qwen", local="train/math_1k5", local_split="train",
           hub=HubSource("sail/Sanity-Test-R1D-1.5B", "train", data_files="train/math_1460.parquet"),
           expected_rows=1460, licence="MIT (sail/Sanity-Test-R1D-1.5B)"),
    Recipe("aime24", "AIME 2024 (30 problems)", "test", "r1_distill_qwen", local="evaluation_suite",
           local_split="aime", hub=HubSource("HuggingFaceH4/aime_2024", "train"), expected_rows=30),
    Recipe("aime25", "AIME 2025 (30 problems), the sanity test's second validation set", "test", "r1_distill_qwen",
           hub=HubSource("sail/Sanity-Test-R1D-1.5B", "test", data_files="test/aime_2025.parquet"), expected_rows=30,
           licence="MIT (sail/Sanity-Test-R1D-1.5B)"),
    Recipe("amc", "AMC 2023 (83 problems)", "test", "qwen_math", local="evaluation_suite", local_split="amc",
           hub=HubSource("AI-MO/aimo-validation-amc", "train"), expected_rows=83),
    Recipe("math500", "MATH500 (the MATH test subset of Lightman et al.)", "test", "qwen_math",
           local="evaluation_suite", local_split="math", hub=HubSource("HuggingFaceH4/MATH-500", "test"),
           expected_rows=500, licence="MIT (MATH)"),
    Recipe("minerva", "Minerva math (272 problems; answers are lists)", "test", "qwen_math",
           local="evaluation_suite", local_split="minerva", hub=HubSource("math-ai/minervamath", "test"),
           expected_rows=272),
    Recipe("olympiadbench", "OlympiadBench (675 problems; answers are lists)", "test", "qwen_math",
           local="evaluation_suite", local_split="olympiad_bench", hub=HubSource("math-ai/olympiadbench", "test"),
           expected_rows=675),
    Recipe("math12k", "MATH-12k (MATH train+test minus MATH500), OctoThinker and LoRA runs", "train", "qwen_math",
           hub=HubSource("lkevinzc/math-12k", "train"), licence="MIT (MATH)"),
    Recipe("dapo17k", "DAPO-Math-17k (deduplicated), MoE and Dense-14B runs", "train", "qwen_math",
           hub=HubSource("BytedTsinghua-SIA/DAPO-Math-17k", "train"), dedupe=True, licence="Apache-2.0"),
    Recipe("sanity-rebuild", "A sanity set rebuilt from MATH train for any model (k samples, keep 20-80% success)",
           "train", "r1_distill_qwen", hub=HubSource("DigitalLearningGmbH/MATH-lighteval", "train"),
           explicit_only=True),
)}


def get_recipe(name: str) -> Recipe:
    """Return the recipe called ``name``, or raise a UserError listing the known ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise UserError(f"unknown dataset {name!r}: choose from {', '.join(RECIPES)}") from None


@dataclass
class BuildResult:
    """What building one dataset did: ``built``, ``exists`` (skipped) or ``unavailable`` (with the reason)."""

    name: str
    template: str
    status: str
    detail: str
    files: dict[str, int] = field(default_factory=dict)


def _read_problems(recipe: Recipe, source: Path | None) -> Loaded:
    if source is not None:
        return load_local(source, recipe.local_split)
    tried = []
    if recipe.local:
        local = shared_data_dir() / recipe.local
        if local.exists():
            return load_local(local, recipe.local_split)
        tried.append(f"local copy {local} (absent)")
    if recipe.hub is None:
        raise UserError(f"{recipe.name}: no source: tried {'; '.join(tried) or 'nothing'}")
    try:
        return load_hub(recipe.hub)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - network, offline mode, missing repo: all mean "unreachable"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        tried.append(f"{recipe.hub.describe()} ({type(exc).__name__}: {first})")
        raise UserError(f"{recipe.name}: no source reachable: tried {'; '.join(tried)}. Pass a local copy with "
                        f"SOURCE=/path/to/copy (make data DATA={recipe.name}) or --source /path/to/copy") from None


def _dedupe(problems: list[Problem]) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.question not in seen:
            seen.add(p.question)
            out.append(p)
    return out


def dataset_file(root: Path, name: str, split: str, template: str) -> Path:
    """Return the parquet an experiment prompting with ``template`` reads for dataset ``name``: the recipe's own
    folder when ``template`` is its default (or ``name`` is no recipe here, e.g. tiny sets), else the sub-folder."""
    recipe = RECIPES.get(name)
    return dataset_dir(root, name, template, recipe.template if recipe else template) / f"{split}.parquet"


def outputs(recipe: Recipe, root: Path, template: str | None = None) -> tuple[Path, Path]:
    """Return the parquet file and example JSON a recipe writes for ``template`` (default: its own)."""
    folder = dataset_dir(root, recipe.name, template, recipe.template)
    return folder / f"{recipe.split}.parquet", folder / f"{recipe.name}_example.json"


def write_dataset(recipe: Recipe, problems: list[Problem], provenance: dict[str, Any], root: Path,
                  template: str | None = None) -> BuildResult:
    """Write ``problems`` as the recipe's parquet + example (atomically) and record them in MANIFEST.json."""
    template = template or recipe.template
    get_template(template)
    parquet, example = outputs(recipe, root, template)
    rows = [make_row(recipe.name, p.question, p.answer, template, recipe.split, i, p.extra)
            for i, p in enumerate(problems)]
    pairs = [(write_parquet_tmp(rows, parquet), parquet),
             (write_text_tmp(json.dumps(rows[0], indent=2, ensure_ascii=False, default=str) + "\n", example), example)]
    commit_files(pairs)
    rel = str(parquet.parent.relative_to(root))
    update_manifest(root, rel, {
        "recipe": recipe.name, "template": template, "description": recipe.description, "licence": recipe.licence,
        "source": provenance,
        "files": {parquet.name: {"rows": len(rows), "sha256": sha256_file(parquet)},
                  example.name: {"sha256": sha256_file(example)}},
    })
    return BuildResult(recipe.name, template, "built", f"{len(rows)} rows -> {parquet}", {parquet.name: len(rows)})


def build(name: str, root: Path, source: Path | None = None, overwrite: bool = False,
          templates: tuple[str, ...] = ()) -> list[BuildResult]:
    """Build dataset ``name`` under ``root`` in its default template plus ``templates``; return one result each.

    Existing outputs are kept unless ``overwrite``. Raises a UserError when no source is reachable.
    """
    recipe = get_recipe(name)
    wanted = [recipe.template] + [t for t in templates if t != recipe.template]
    for t in wanted:
        get_template(t)
    todo = [t for t in wanted if overwrite or not outputs(recipe, root, t)[0].exists()]
    results = [BuildResult(name, t, "exists", f"{outputs(recipe, root, t)[0]} (OVERWRITE=1 to rebuild)")
               for t in wanted if t not in todo]
    if not todo:
        return results
    loaded = _read_problems(recipe, source)
    problems = _dedupe(loaded.problems) if recipe.dedupe else loaded.problems
    if recipe.expected_rows is not None and len(problems) != recipe.expected_rows:
        loaded.provenance["warning"] = f"expected {recipe.expected_rows} rows, source gave {len(problems)}"
    for t in todo:
        results.append(write_dataset(recipe, problems, loaded.provenance, root, t))
    return results
