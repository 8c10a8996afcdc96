"""The mismatch ladder's real rungs measured offline: what each rung's rollout format costs in mismatch before any
training.

The shipped model is sampled on the rungs' training prompts once per rollout format of the ladder's real rungs (the
registry's arms in the ladder panel without synthetic noise, ``rung_pairs``) and each sample set is recomputed by the
training engine in the rung's training dtype, all into one result folder, ``ladder-formats``, so every rung shares the
prompts and the sample count.
``python -m precision_rl.mismatch.formats`` (``make mismatch-formats``); an existing result is kept unless ``--redo``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from precision_rl.config.registry import LADDER_PANEL, ExperimentSpec, load_all
from precision_rl.config.scale import TINY
from precision_rl.errors import UserError
from precision_rl.launch.overrides import data_files
from precision_rl.mismatch.layout import FORMATS_RESULT, existing_result
from precision_rl.mismatch.width import measure
from precision_rl.paths import data_root
from precision_rl.tiny.pretrain import shipped_model

NUM_PROMPTS, SAMPLES, MAX_TOKENS = 64, 8, 64  # 512 answers; the model's own end after ~37 tokens, within the budget


def rung_specs() -> list[ExperimentSpec]:
    """Return the tiny-scale experiments whose arms are real rungs of the ladder panel: those in the panel whose
    rollout is a format, not a synthetic perturbation."""
    return [spec for spec in load_all(TINY).values()
            if spec.panel_arms(LADDER_PANEL) and not spec.hyper.rollout_logit_noise]


def rung_pairs(specs: list[ExperimentSpec]) -> list[tuple[str, str]]:
    """Return the (train, infer) pair of every rung of ``specs`` in the ladder panel, each once, in their order."""
    return list(dict.fromkeys((arm.train, arm.infer) for spec in specs for arm in spec.panel_arms(LADDER_PANEL)))


def training_prompts(specs: list[ExperimentSpec]) -> Path:
    """Return the training parquet the rungs share; UserError where they do not share one."""
    files = sorted({data_files(spec, data_root())[0] for spec in specs})
    if len(files) != 1:
        raise UserError(f"the ladder's real rungs train on {len(files)} datasets ({', '.join(map(str, files))}); "
                        "their offline measurement needs one prompt set")
    return files[0]


def tool_arguments(pairs: list[tuple[str, str]], prompts: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Return the mismatch tool's self-pair dtypes and its other arguments (``--pairs``, the prompts and the
    sampling) for ``pairs``."""
    own = tuple(train for train, infer in pairs if train == infer)
    crossed = ",".join(f"{train}-{infer}" for train, infer in pairs if train != infer)
    return own, ("--data", str(prompts), "--pairs", crossed, "--num-prompts", str(NUM_PROMPTS), "--n", str(SAMPLES),
                 "--max-tokens", str(MAX_TOKENS))


def run(redo: bool = False) -> int:
    """Measure every real rung's pair on the shipped model; return the exit status."""
    if not redo and (found := existing_result(FORMATS_RESULT)):
        print(f"{FORMATS_RESULT}: results exist in {found}, skipped (--redo measures again)", flush=True)
        return 0
    specs = rung_specs()
    own, extra = tool_arguments(rung_pairs(specs), training_prompts(specs))
    return measure(shipped_model(), FORMATS_RESULT, (*extra, *(("--overwrite",) if redo else ())), dtypes=own)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the measurement; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redo", action="store_true", help="measure again, replacing the result in runs/mismatch")
    args = p.parse_args(argv)
    try:
        return run(args.redo)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
