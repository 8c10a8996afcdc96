"""The verl release the extensions are written against, checked where verl loads them and before a run starts."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from precision_rl.verl_ext.settings import VERL_VERSION


def verl_version_problem() -> str | None:
    """Return why the installed verl is not the one the extensions are written against (``VERL_VERSION``), or None."""
    try:
        found = version("verl")
    except PackageNotFoundError:
        return "verl is not installed"
    if found != VERL_VERSION:
        return (f"precision_rl's verl extensions are written against verl {VERL_VERSION}, found verl {found}: install "
                "the locked one (requirements/verl.lock on a CPU, requirements/gpu.lock on GPU nodes)")
    return None
