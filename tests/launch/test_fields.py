"""Every experiment field says what it is, and docs/fields.md lists the verl keys it renders to as the launcher
renders them today."""

from __future__ import annotations

from precision_rl.config.registry import HYPER_FIELDS, Hyper
from precision_rl.launch import fields
from precision_rl.paths import REPO_ROOT


def test_every_field_says_what_it_is():
    missing = [name for name in HYPER_FIELDS if not Hyper.__pydantic_fields__[name].description]
    assert missing == []


def test_every_field_renders_to_a_verl_key_on_some_backend():
    rows = fields.field_rows()
    assert [r["field"].strip("`") for r in rows] == list(HYPER_FIELDS)
    assert [r["field"] for r in rows if r["verl key (FSDP)"] == r["verl key (Megatron)"] == "—"] == []
    by_name = {r["field"].strip("`"): r for r in rows}
    assert by_name["norm_adv_by_std"]["verl key (FSDP)"] == "`algorithm.norm_adv_by_std_in_grpo`"
    assert by_name["eps"]["verl key (Megatron)"] == "`actor_rollout_ref.actor.optim.override_optimizer_config.adam_eps`"
    assert by_name["megatron_tensor_parallel"]["verl key (FSDP)"] == "—"


def test_the_committed_fields_page_is_current():
    committed = (REPO_ROOT / fields.FIELDS_DOC).read_text()
    assert committed == fields.fields_markdown(), "docs/fields.md is stale: python -m precision_rl fields --write"
