"""The experiment fields as verl sees them: for every ``hyper`` field, what it is (its description in the schema) and
the verl 0.9.1 key(s) it renders to on each backend, found by rendering the field at two values and keeping the
overrides that change. ``python -m precision_rl fields`` prints the table; docs/fields.md is its committed copy.
"""

from __future__ import annotations

import dataclasses
import textwrap
import typing
from pathlib import Path

from precision_rl.config import registry
from precision_rl.config.registry import HYPER_FIELDS, ExperimentSpec, Hyper
from precision_rl.config.scale import TINY
from precision_rl.errors import UserError
from precision_rl.launch.overrides import RunContext, verl_overrides

FIELDS_DOC = Path("docs") / "fields.md"
BACKEND_BASES = {"fsdp": registry.INSTRUMENT_EXPERIMENT, "megatron": "moe/grpo_seq_mis"}
# Fields only some algorithms read: rendered on an experiment of such an algorithm.
ALGORITHM_BASES = {"is_threshold": "sanity/grpo_token_tis", "gen_batch_size": "dense14b/dapo",
                   "filter_groups_metric": "dense14b/dapo", "overlong_buffer_len": "dense14b/dapo",
                   "overlong_penalty_factor": "dense14b/dapo"}
# Fields rendered at tiny scale only (the paper scale refuses them), on an experiment that sets them.
TINY_ONLY_BASES = {"rollout_logit_noise": "ladder/synthetic_s2", "logit_noise_in_trainer": "ladder/synthetic_s2"}
_CTX = RunContext(run_name="fields", seed=1, data_dir=Path("/data"), metrics_path=Path("/runs/m.jsonl"),
                  checkpoint_dir=Path("/runs/ckpt"), gpus_per_node=8, nnodes=1)


def _two_values(name: str, current):
    """Return two distinct valid values of field ``name`` (its current value and another where it has one)."""
    hint = typing.get_type_hints(Hyper, include_extras=True)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    inner = typing.get_args(args[0])[0] if typing.get_origin(args[0]) is typing.Annotated else args[0]
    if typing.get_origin(inner) is typing.Literal:
        return typing.get_args(inner)[:2]
    if inner is bool:
        return True, False
    if inner is int:
        return (current, current * 2) if current else (2, 4)
    if inner is float:
        return (current, current * 2) if current else (0.25, 0.5)
    if inner is str:
        return (current, "seq_reward") if current else ("acc", "seq_reward")
    return (0.9, 0.95), (0.8, 0.9)  # betas


def _key(override: str) -> str:
    return override.lstrip("+").split("=", 1)[0]


def rendered_keys(name: str, backend: str, specs: dict[str, ExperimentSpec]) -> list[str]:
    """Return the verl keys field ``name`` renders to on ``backend``, sorted (empty: not rendered there)."""
    base = specs[TINY_ONLY_BASES.get(name) or ALGORITHM_BASES.get(name, BACKEND_BASES[backend])]
    base = dataclasses.replace(base, backend=backend, scale=TINY if name in TINY_ONLY_BASES else base.scale)
    rendered = []
    for value in _two_values(name, getattr(base.hyper, name)):
        spec = dataclasses.replace(base, hyper=dataclasses.replace(base.hyper, **{name: value}))
        try:
            rendered.append(set(verl_overrides(spec, spec.arms[0], _CTX)))
        except UserError:  # a value the backend refuses (the control's noise in a Megatron trainer)
            return []
    return sorted({_key(o) for o in rendered[0] ^ rendered[1]})


def field_rows() -> list[dict[str, str]]:
    """Return one row per ``hyper`` field: its name, what it is, and its verl keys on FSDP and on Megatron."""
    specs = registry.load_all(registry.PAPER)
    rows = []
    for name in HYPER_FIELDS:
        info = Hyper.__pydantic_fields__[name]
        keys = {b: ", ".join(f"`{k}`" for k in rendered_keys(name, b, specs)) or "—" for b in BACKEND_BASES}
        rows.append({"field": f"`{name}`", "what it is": info.description or "", "verl key (FSDP)": keys["fsdp"],
                     "verl key (Megatron)": keys["megatron"]})
    return rows


def fields_markdown() -> str:
    """Return docs/fields.md: the table of every field, with a header saying how it is made."""
    from precision_rl.console import render_table

    rows = field_rows()
    table = render_table([list(r.values()) for r in rows], list(rows[0]), markdown=True)
    return "# Experiment fields and the verl keys they become\n\n" + textwrap.fill(
            "Written by `python -m precision_rl fields --write` from the schema (`precision_rl/config/registry.py`, "
            "`Hyper`: each field's description) and the launcher's rendering (`precision_rl/launch/overrides.py`): "
            "a field's keys are the verl 0.9.1 overrides that change when the field's value changes. "
            "`tests/launch/test_fields.py` fails when this file is stale. Besides `hyper`, an experiment names its "
            "`model` (`actor_rollout_ref.model.path`), `template` (the prompt's chat template and stop strings), "
            "`grader` (`reward.custom_reward_function.reward_kwargs.grader`), `data` (`data.train_files`, "
            "`data.val_files`), `algorithm` (`precision_rl/config/algorithms.py`), `precision` "
            "(`precision_rl/config/precision.py`) and `lora` (`actor_rollout_ref.model.lora_*`).", 118,
            break_on_hyphens=False, break_long_words=False) + "\n\n" + table + "\n"
