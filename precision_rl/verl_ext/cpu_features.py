"""Which fp16 matrix kernels this CPU has, and so how the CPU training engine computes fp16 GEMMs."""

from __future__ import annotations

import os
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.verl_ext.settings import FP16_GEMM_CHOICES, FP16_GEMM_ENV

# CPU flags (as /proc/cpuinfo names them) that give torch fast fp16 GEMMs on x86: AVX512-FP16 and AMX-FP16.
FP16_MATRIX_FLAGS = ("avx512_fp16", "amx_fp16")
# The flags that set how fast this CPU runs each dtype's matrix products; every run and benchmark records them.
MATRIX_FLAGS = (*FP16_MATRIX_FLAGS, "avx512_bf16", "amx_bf16", "amx_tile", "avx512f")
CPUINFO = Path("/proc/cpuinfo")


def _first_cpu_field(names: tuple[str, ...], cpuinfo: Path) -> str | None:
    """Return the value of the first line of ``cpuinfo`` that starts with one of ``names`` (None where absent)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(names):
            return line.split(":", 1)[1].strip()
    return None


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """Return the feature flags of the first CPU in ``cpuinfo`` (empty where the file is absent)."""
    return set((_first_cpu_field(("flags", "Features"), cpuinfo) or "").split())


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """Return the first CPU's model name in ``cpuinfo`` (None where the file or the field is absent)."""
    return _first_cpu_field(("model name",), cpuinfo)


def matrix_flags(flags: set[str] | None = None) -> list[str]:
    """Return, sorted, which of ``MATRIX_FLAGS`` this CPU (or ``flags``) has."""
    flags = cpu_flags() if flags is None else flags
    return sorted(f for f in MATRIX_FLAGS if f in flags)


def fp16_gemm_mode(flags: set[str] | None = None) -> str:
    """Return ``"native"`` when this CPU has fp16 matrix kernels, else ``"emulated"``; ``$PRECISION_RL_FP16_GEMM``
    overrides the choice."""
    forced = os.environ.get(FP16_GEMM_ENV)
    if forced:
        if forced not in FP16_GEMM_CHOICES:
            raise UserError(f"{FP16_GEMM_ENV}={forced!r}: choose one of {', '.join(FP16_GEMM_CHOICES)}")
        return forced
    flags = cpu_flags() if flags is None else flags
    return "native" if flags & set(FP16_MATRIX_FLAGS) else "emulated"
