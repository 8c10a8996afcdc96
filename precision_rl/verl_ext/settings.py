"""Names shared by the launcher and the verl extensions: environment variables, the platform name, the plugin."""

from __future__ import annotations

# verl imports every module named here in each of its processes (``verl/__init__.py``, verl 0.9.1).
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
# verl's platform override (``verl.plugin.platform.platform_manager``, verl 0.9.1).
PLATFORM_ENV = "VERL_PLATFORM"
PLUGIN_MODULE = "precision_rl.verl_ext.plugin"
# verl's config sections of the policy, its reference copy and the rollout engine.
ACTOR, REF, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout"
PLATFORM_NAME = "cpu"
# How the CPU engines compute a 16-bit format's GEMMs: "native" (the library's 16-bit kernels) or "emulated" (fp32
# GEMMs on 16-bit-rounded operands, rounded to 16 bits). Unset: chosen from the CPU's flags
# (precision_rl.verl_ext.cpu.features); set, it forces the choice for that format in both engines.
GEMM_ENV = {"fp16": "PRECISION_RL_FP16_GEMM", "bf16": "PRECISION_RL_BF16_GEMM"}
GEMM_CHOICES = ("native", "emulated")
# The step after which the trainer stops, its schedule still set by trainer.total_training_steps: a run of the quick
# profile is then the first steps of the calibrated run of its seed (precision_rl.verl_ext.trainer).
STOP_AFTER_STEP_KEY = "trainer.stop_after_step"
# verl's checkpoint frequency in steps: the quick profile sets its own (precision_rl.config.profiles).
SAVE_FREQ_KEY = "trainer.save_freq"
# The quantized format (precision_rl.formats.QUANTIZED_FORMATS) the CPU platform's rollout engine quantizes its
# linear layers to; unset: none (precision_rl.verl_ext.cpu.gemm).
ROLLOUT_FORMAT_ENV = "PRECISION_RL_ROLLOUT_FORMAT"
# The synthetic mismatch's vLLM logits processor, by the qualified name vLLM's --logits-processors takes
# (module:class, vllm.v1.sample.logits_processor._load_logitsprocs_by_fqcns); naming it here keeps vLLM out of the
# launcher.
LOGIT_NOISE_PROCESSOR = "precision_rl.verl_ext.vllm_logit_noise:RolloutLogitNoise"
# The verl release every extension here is written and tested against (the locks pin it at both scales).
VERL_VERSION = "0.9.1"
