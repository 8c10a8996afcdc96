"""The requirement locks under ``requirements/``: which exact version of each package an environment pins.

``make setup`` installs the CPU environment from ``CPU_PINS``, ``environment.yml`` the GPU one from ``GPU_PINS``.
"""

from __future__ import annotations

import re
from pathlib import Path

from precision_rl.paths import REPO_ROOT

REQUIREMENTS = REPO_ROOT / "requirements"
CPU_PINS = ("cpu-torch.txt", "cpu.lock", "verl.lock")  # what `make setup` installs, in order
GPU_PINS = ("gpu.lock",)  # what environment.yml installs


def normalized(name: str) -> str:
    """Return a package name as the locks compare it (PEP 503: lower case, runs of -_. as one -)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_versions(*files: str, root: Path = REQUIREMENTS) -> dict[str, str]:
    """Return {normalised package name: exact version} over requirement files (a later file's pin wins)."""
    pins: dict[str, str] = {}
    for name in files:
        for pkg, version in re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)", (root / name).read_text(), re.M):
            pins[normalized(pkg)] = version
    return pins
