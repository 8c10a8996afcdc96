"""Which fp16 matrix kernels this CPU has, and so how the CPU training engine computes fp16 GEMMs."""

from __future__ import annotations

import os
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.verl_ext.settings import FP16_GEMM_CHOICES, FP16_GEMM_ENV

# CPU flags (as /proc/cpuinfo names them) that give torch fast fp16 GEMMs on x86: AVX512-FP16 and AMX-FP16.
FP16_MATRIX_FLAGS = ("avx512_fp16", "amx_fp16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """Return the feature flags of the first CPU in ``cpuinfo`` (empty where the file is absent)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


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
