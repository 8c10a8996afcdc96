"""The registry holds every run of the paper and rejects malformed specs with the file and field named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from precision_rl.config import docs_refs, registry
from precision_rl.config.scale import SCALES
from precision_rl.errors import SpecError, UserError
from precision_rl.paths import DOCS_DIR

SANITY_ALGOS = ["grpo", "grpo_token_tis", "grpo_seq_mis", "gspo", "pg_seq_is", "pg_seq_mis", "pg_seq_tis"]


@pytest.fixture(scope="module")
def specs():
    return registry.load_all("paper")


def test_every_paper_run_is_registered(specs):
    for algo in SANITY_ALGOS:
        spec = specs[f"sanity/{algo}"]
        assert spec.algorithm == algo and set(spec.arm_labels) == {"fp16", "bf16"}
        assert spec.model == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" and spec.data.val == ("aime24", "aime25")
    assert specs["octothinker/grpo"].model == "OctoThinker/OctoThinker-3B-Hybrid-Base"
    assert (specs["lora/grpo_token_tis"].lora.rank, specs["lora/grpo_token_tis"].lora.alpha) == (1, 2)
    assert (specs["lora/grpo_token_tis_rank32"].lora.rank, specs["lora/grpo_token_tis_rank32"].lora.alpha) == (32, 64)
    assert {specs[f"moe/{a}"].algorithm for a in ("grpo_seq_mis", "grpo_token_tis", "pg_seq_tis")} == {
        "grpo_seq_mis", "grpo_token_tis", "pg_seq_tis"}
    assert specs["dense14b/dapo"].algorithm == "dapo" and specs["dense14b/dapo"].model == "Qwen/Qwen3-14B-Base"
    cells = [(a.train, a.infer) for spec in specs.values() for a in spec.panel_arms("ablation")]
    assert sorted(cells) == sorted((t, i) for t in ("bf16", "fp16", "fp32") for i in ("bf16", "fp16", "fp32"))
    assert {(a.train, a.infer) for a in specs["sanity/grpo"].panel_arms("ablation")} == {("bf16", "bf16"),
                                                                                        ("fp16", "fp16")}


def test_paper_values_and_hidden_fork_settings(specs):
    h = specs["sanity/grpo"].hyper
    assert (h.weight_decay, h.betas, h.eps, h.norm_adv_by_std) == (0.0, (0.9, 0.95), 1e-15, False)
    assert (h.loss_scale_factor, h.max_response_length, h.clip_ratio_high) == (8192, 8192, 0.28)
    assert specs["sanity/grpo_token_tis"].hyper.is_threshold == 2.0
    assert specs["sanity/grpo_seq_mis"].hyper.is_threshold == 10.0
    gspo = specs["sanity/gspo"].hyper
    assert (gspo.clip_ratio_low, gspo.clip_ratio_high) == (3e-4, 4e-4)
    assert specs["sanity/pg_seq_tis"].variant_of == "sanity/pg_seq_mis"


def test_source_conflicts_are_variants_with_the_default_feeding_the_figures(specs):
    """Where sources disagree, the default feeds the panel and the other reading is a registered variant."""
    pairs = {"sanity/gspo_oat": "sanity/gspo", "sanity/grpo_seq_mis_c3": "sanity/grpo_seq_mis",
             "sanity/pg_seq_tis": "sanity/pg_seq_mis", "lora/grpo_token_tis_rank32": "lora/grpo_token_tis"}
    for variant, default in pairs.items():
        assert specs[variant].variant_of == default and not specs[variant].paper and specs[default].paper
    # GSPO: the VeRL fork's Dr.GRPO settings (panels d are VeRL runs) vs oat's token mean with std normalisation.
    fork, oat = specs["sanity/gspo"].hyper, specs["sanity/gspo_oat"].hyper
    assert (fork.loss_agg_mode, fork.norm_adv_by_std) == ("seq-mean-token-sum-norm", False)
    assert (oat.loss_agg_mode, oat.norm_adv_by_std, oat.loss_scale_factor) == ("seq-mean-token-mean", True, None)
    assert (specs["sanity/grpo_seq_mis"].hyper.is_threshold, specs["sanity/grpo_seq_mis_c3"].hyper.is_threshold) == (10, 3)
    # LoRA: the authors' scripts (rank 1, alpha 2) are the primary source and the default.
    assert specs["lora/grpo_token_tis"].lora.rank == 1


def test_evaluation_cadence_follows_the_figures(specs):
    assert all(specs[f"sanity/{a}"].hyper.test_freq == 50 for a in SANITY_ALGOS)
    assert all(specs[f"moe/{a}"].hyper.test_freq == 4 for a in ("grpo_seq_mis", "grpo_token_tis", "pg_seq_tis"))
    assert specs["dense14b/dapo"].hyper.test_freq == 5


def test_oat_runs_evaluate_by_sampling_and_have_no_dual_clip(specs):
    for name in ("octothinker/grpo", "lora/grpo_token_tis", "lora/grpo_token_tis_rank32"):
        h = specs[name].hyper
        assert (h.val_temperature, h.val_top_p, h.val_n) == (0.6, 0.95, 1), name
        assert h.clip_ratio_c >= 1e9, name
    assert specs["sanity/grpo"].hyper.clip_ratio_c is None  # the VeRL fork kept verl's dual clip


def test_assumptions_are_tagged_and_listed(specs):
    assert specs["sanity/grpo"].assumptions == [] and specs["octothinker/grpo"].assumptions == []
    moe = specs["moe/grpo_seq_mis"].assumptions
    assert {"template", "data", "reward", "hyper.is_threshold", "hyper.megatron_tensor_parallel"} <= set(moe)
    assert {"algorithm", "precision"} <= set(specs["ablation/precision"].assumptions)
    assert "hyper.is_threshold" in specs["sanity/pg_seq_mis"].assumptions


def test_every_panel_of_figures_1_and_2_has_one_experiment(specs):
    for fig in ("fig1", "fig2"):
        panels = [p.panel for s in specs.values() for p in s.paper if p.panel.startswith(fig)]
        assert sorted(panels) == [f"{fig}{c}" for c in "abcdefghijkl"]


def test_every_hyper_value_has_a_source(specs):
    for spec in specs.values():
        for field in registry.HYPER_FIELDS:
            if getattr(spec.hyper, field) is not None:
                assert f"hyper.{field}" in spec.sources, (spec.name, field)


def test_tiny_profiles_validate(specs):
    for name in specs:
        tiny = registry.load_experiment(name, "tiny")
        assert tiny.model == "tiny" and tiny.resources.gpus_per_node == 1


def _write(root: Path, rel: str, doc: dict) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


# A source that resolves: any heading of the project's docs.
SRC = "docs/sources.md#suite-settings: test value"


@pytest.fixture
def tree(tmp_path):
    """A private registry: a copy of the bases plus one experiment to break."""
    shutil.copytree(registry.EXPERIMENTS_DIR / "_base", tmp_path / "_base")
    good = {"extends": "_base/sanity.yaml", "description": "x", "algorithm": "grpo", "sources": {"algorithm": SRC}}
    _write(tmp_path, "fam/exp.yaml", good)
    return tmp_path, good


@pytest.mark.parametrize("change,field", [
    ({"algorithm": "ppo2"}, "algorithm"),
    ({"precision": ["fp8"]}, "precision[0]"),
    ({"hyper": {"learning_rate": 1e-6}}, "hyper.learning_rate"),
    ({"hyper": {"lr": "fast"}}, "hyper.lr"),
    ({"hyper": {"is_threshold": 2.0}}, "sources.hyper.is_threshold"),
    ({"algorithm": "grpo_token_tis", "hyper": {"is_threshold": None}}, "hyper.is_threshold"),
    ({"backend": "deepspeed"}, "backend"),
    ({"hyper": {"lr_scheduler_type": "linear"}, "sources": {"algorithm": SRC, "hyper.lr_scheduler_type": SRC}},
     "hyper.lr_scheduler_type"),
    ({"modle": "x"}, "modle"),
    ({"hyper": {"val_only": True, "val_before_train": False},
      "sources": {"algorithm": SRC, "hyper.val_only": SRC, "hyper.val_before_train": SRC}}, "hyper.val_only"),
    ({"extends": "_base/nope.yaml"}, "extends"),
    ({"sources": {"algorithm": "paper_spec §1b row 1"}}, "sources.algorithm"),
    ({"hyper": {"rollout_logit_noise": -1.0}, "sources": {"algorithm": SRC, "hyper.rollout_logit_noise": SRC}},
     "hyper.rollout_logit_noise"),
])
def test_bad_specs_name_file_and_field(tree, change, field):
    root, good = tree
    _write(root, "fam/exp.yaml", {**good, **change})
    with pytest.raises(SpecError) as err:
        registry.load_experiment("fam/exp", root=root)
    assert err.value.field == field and err.value.path.endswith("fam/exp.yaml")
    assert str(err.value).startswith(f"{root.name}/fam/exp.yaml: field '{field}'")


def test_loading_an_experiment_reads_no_docs(monkeypatch):
    """A citation's section is checked by tests/config/test_docs_refs.py, never at load time: editing a page of docs/
    cannot break loading an experiment."""
    docs_refs.anchors.cache_clear()
    read_text = Path.read_text

    def refuse_docs(path, *args, **kwargs):
        assert not Path(path).resolve().is_relative_to(DOCS_DIR.resolve()), f"loading read {path}"
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse_docs)
    for scale in SCALES:
        assert registry.load_all(scale)


def test_missing_field_is_named(tree):
    root, good = tree
    base = yaml.safe_load((root / "_base/sanity.yaml").read_text())
    del base["model"]
    _write(root, "_base/sanity.yaml", base)
    with pytest.raises(SpecError, match="field 'model': missing"):
        registry.load_experiment("fam/exp", root=root)


def test_unknown_experiment_is_a_clear_error():
    with pytest.raises(UserError, match="unknown experiment 'sanity/grp'.*sanity/grpo"):
        registry.load_experiment("sanity/grp")


def test_select_globs_in_registry_order():
    names = [s.name for s in registry.select(["sanity/grpo*", "moe/*"])]
    assert names == ["sanity/grpo", "sanity/grpo_fork_grader", "sanity/grpo_seq_mis", "sanity/grpo_seq_mis_c3",
                     "sanity/grpo_token_tis", "moe/grpo_seq_mis", "moe/grpo_token_tis", "moe/pg_seq_tis"]
