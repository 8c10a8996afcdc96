"""Names shared by the launcher and the verl extensions: environment variables, the platform name, the plugin."""

from __future__ import annotations

# verl imports every module named here in each of its processes (verl/__init__.py:49).
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
# verl's platform override (verl/plugin/platform/platform_manager.py:94).
PLATFORM_ENV = "VERL_PLATFORM"
PLUGIN_MODULE = "precision_rl.verl_ext.plugin"
PLATFORM_NAME = "cpu"
# How the CPU training engine computes fp16 GEMMs: "native" (torch's fp16 kernels) or "emulated" (fp32 GEMMs on
# fp16-rounded operands, rounded to fp16). Unset: chosen from the CPU's features (precision_rl.verl_ext.cpu_features).
FP16_GEMM_ENV = "PRECISION_RL_FP16_GEMM"
FP16_GEMM_CHOICES = ("native", "emulated")
