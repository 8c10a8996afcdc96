"""Every conflict between sources is visible and runnable: each ``[C]`` sources entry names a variant that exists and
sets another value, or a verl override that verl's own config accepts; docs/sources.md#conflicts lists exactly
those; every ``[A]`` entry points to the documented assumptions."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from precision_rl import paths
from precision_rl.config import registry
from precision_rl.errors import SpecError
from precision_rl.launch.overrides import RunContext, compose, config_name, verl_overrides

SPECS = registry.load_all("paper")
CONFLICTS = [(name, key, kind, target) for name, spec in SPECS.items()
             for key, (kind, target) in spec.conflicts.items()]
CTX = RunContext(run_name="t-run", seed=7, data_dir=Path("/data"), metrics_path=Path("/runs/r/metrics.jsonl"),
                 checkpoint_dir=Path("/runs/r/checkpoints"), gpus_per_node=8, nnodes=1)
SOURCES_MD = paths.REPO_ROOT / "docs" / "sources.md"
_VARIANT_CELL = re.compile(r"variant `(?P<name>[^`]+)`")
_EXTRA_CELL = re.compile(r"`EXTRA='(?P<override>[^']+)'`")


def _value(spec: registry.ExperimentSpec, key: str):
    if key == "grader":
        return spec.grader
    node = spec.raw
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _docs_table() -> list[str]:
    """Return the "Runs as" cells of the conflicts table in docs/sources.md."""
    section = SOURCES_MD.read_text().split("\n## Conflicts\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    column = header.index("Runs as")
    return [[c.strip() for c in row.strip("|").split("|")][column] for row in rows[1:]]


def test_the_registry_records_conflicts():
    assert len(CONFLICTS) >= 9
    assert SPECS["sanity/grpo"].conflicts["grader"] == ("variant", "sanity/grpo_fork_grader")


@pytest.mark.parametrize("name,key,kind,target", [c for c in CONFLICTS if c[2] == "variant"],
                         ids=lambda v: str(v))
def test_a_conflict_variant_exists_and_sets_the_other_value(name, key, kind, target):
    assert target in SPECS, f"{name} {key}: variant {target} is not an experiment"
    variant = SPECS[target]
    assert variant.variant_of, f"{target} does not say which experiment it is a variant of"
    assert _value(variant, key) != _value(SPECS[name], key), f"{target} sets the same {key} as {name}"


@pytest.mark.parametrize("override", sorted({c[3] for c in CONFLICTS if c[2] == "extra"}))
def test_a_conflict_override_is_a_key_verl_accepts(override):
    name = next(c[0] for c in CONFLICTS if c[3] == override)
    spec = SPECS[name]
    base = verl_overrides(spec, spec.arms[0], CTX)
    key, _, value = override.partition("=")
    cfg = compose(config_name(spec), base + [override])
    node = cfg
    for part in key.split("."):
        node = node[part]
    assert str(node) == value or float(node) == float(value)
    before = compose(config_name(spec), base)
    for part in key.split("."):
        before = before[part]
    assert str(before) != str(node), f"{override} is already {name}'s value: no conflict to run"


def test_the_docs_table_lists_every_conflict_and_no_other():
    cells = _docs_table()
    listed = {("variant", m["name"]) for c in cells for m in _VARIANT_CELL.finditer(c)}
    listed |= {("extra", m["override"]) for c in cells for m in _EXTRA_CELL.finditer(c)}
    recorded = {(kind, target) for _, _, kind, target in CONFLICTS}
    assert recorded - listed == set(), "conflicts in experiments/ missing from docs/sources.md#conflicts"
    assert listed - recorded == set(), "docs/sources.md#conflicts lists a conflict no experiment records"


def test_every_assumption_points_to_the_documented_assumptions():
    loose = [(n, k) for n, s in SPECS.items() for k in s.assumptions
             if "docs/sources.md#assumptions" not in s.sources[k]]
    assert loose == []


def test_a_conflict_without_a_way_to_run_it_is_refused(tmp_path):
    shutil.copytree(paths.EXPERIMENTS_DIR / "_base", tmp_path / "_base")
    doc = (paths.EXPERIMENTS_DIR / "sanity" / "grpo.yaml").read_text().replace("extends: _base/sanity.yaml\n", "")
    base = (paths.EXPERIMENTS_DIR / "_base" / "sanity.yaml").read_text()
    (tmp_path / "_base" / "sanity.yaml").write_text(base.replace(
        "runs as EXTRA='actor_rollout_ref.rollout.val_kwargs.top_p=1.0'", "see the docs"))
    (tmp_path / "x.yaml").write_text("extends: _base/sanity.yaml\n" + doc)
    with pytest.raises(SpecError, match=r"sources.hyper.val_top_p.*names no way to run the other value"):
        registry.load_experiment("x", root=tmp_path)
