"""The entry point of every run at both scales: verl's own ``main_ppo`` with the project's extensions.

``python -m precision_rl.verl_ext.main <hydra overrides>`` is ``python -m verl.trainer.main_ppo`` (same Hydra
config, same overrides, same trainer) after naming ``precision_rl.verl_ext.plugin`` in
``VERL_USE_EXTERNAL_MODULES``, so that verl loads the extensions in this process and in each Ray worker it
starts (they inherit the environment).
"""

from __future__ import annotations

import os

from precision_rl.verl_ext.settings import EXTERNAL_MODULES_ENV, PLUGIN_MODULE


def with_plugin(value: str | None) -> str:
    """Return ``value`` (a comma-separated module list, possibly empty) with the plugin module added once."""
    modules = [m for m in (value or "").split(",") if m]
    return ",".join(modules if PLUGIN_MODULE in modules else [PLUGIN_MODULE, *modules])


def main() -> None:
    """Load the extensions and run verl's ``main_ppo`` on the command line's Hydra overrides."""
    os.environ[EXTERNAL_MODULES_ENV] = with_plugin(os.environ.get(EXTERNAL_MODULES_ENV))
    from verl.trainer.main_ppo import main as verl_main

    verl_main()


if __name__ == "__main__":
    main()
