"""The width study: the offline mismatch of tiny models that differ only in width.

Each width is its own SFT build of the tiny model: the tiny scale's recipe with the hidden size, the MLP width
(the same 2.75 ratio), the attention heads (64 dimensions each, two queries per key/value head) changed, and fewer
SFT steps than the tiny scale's model so that the widest stays affordable on 2 cores (each build is cached under
``.cache/tiny-model/<key>``). Then the mismatch tool measures each model as ``make mismatch`` does by default,
under the result name ``tiny-w<width>``. ``python -m precision_rl.mismatch.width [--widths 128 256 384] [--redo]``;
widths whose results exist (in runs/mismatch or published in results/logs/mismatch) are skipped unless ``--redo``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from precision_rl.config.scale import TINY
from precision_rl.errors import UserError
from precision_rl.mismatch.layout import existing_result
from precision_rl.paths import REPO_ROOT
from precision_rl.tiny.model import TinyModelConfig
from precision_rl.tiny.pretrain import PretrainConfig, ensure_tiny_model

WIDTHS = (128, 256, 384)  # 512 would cost ~4x the 256 build on 2 cores
HEAD_DIM = 64
STUDY_STEPS = 400
RESULT_PREFIX = "tiny-w"
STUDY_SCALE = TINY  # the scale of every model the study builds


def width_config(width: int, steps: int = STUDY_STEPS) -> PretrainConfig:
    """Return the SFT recipe of the study's model of hidden size ``width`` (the tiny recipe, ``steps`` SFT steps)."""
    base = TinyModelConfig()
    if width % (2 * HEAD_DIM):
        raise UserError(f"width {width} is not a multiple of {2 * HEAD_DIM} (heads of {HEAD_DIM}, two per KV head)")
    heads = width // HEAD_DIM
    model = replace(base, hidden_size=width, intermediate_size=width * base.intermediate_size // base.hidden_size,
                    num_attention_heads=heads, num_key_value_heads=heads // 2)
    return replace(PretrainConfig(), model=model, steps=steps)


def result_name(width: int) -> str:
    """Return the mismatch result folder name of the study's model of hidden size ``width``."""
    return f"{RESULT_PREFIX}{width}"


def measure(model: Path, name: str, extra: tuple[str, ...] = (), dtypes: tuple[str, ...] = ("bf16", "fp16")) -> int:
    """Run the mismatch tool on ``model`` (the ``dtypes`` self pairs, result folder ``name``, ``extra`` arguments) in
    a subprocess; return its exit status."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    cmd = [sys.executable, "-m", "precision_rl", "mismatch", "--model", str(model), "--name", name,
           "--dtypes", " ".join(dtypes), *extra]
    print(f"{name}: {' '.join(cmd[1:])}", flush=True)
    status = subprocess.run(cmd, cwd=REPO_ROOT, env=env).returncode
    if status:
        print(f"{name}: the mismatch tool failed (exit {status})", file=sys.stderr)
    return status


def run(widths: tuple[int, ...] = WIDTHS, steps: int = STUDY_STEPS, redo: bool = False) -> int:
    """Build each width's model and measure its mismatch (bf16 and fp16 self pairs); return the exit status.

    A width whose results exist is skipped, unless ``redo``: then it is measured again and its results in
    runs/mismatch are replaced (a published copy is replaced only by ``make publish-mismatch``).
    """
    for width in widths:
        if not redo and (found := existing_result(result_name(width))):
            print(f"width {width}: results exist in {found}, skipped", flush=True)
            continue
        status = measure(ensure_tiny_model(width_config(width, steps)), result_name(width),
                         ("--overwrite",) if redo else ())
        if status:
            return status
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the study; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    p.add_argument("--steps", type=int, default=STUDY_STEPS, help="SFT steps of every width's model")
    p.add_argument("--redo", action="store_true",
                   help="measure widths whose results exist again, replacing them in runs/mismatch (so that every "
                        "width is measured on one machine, by one version of the code)")
    args = p.parse_args(argv)
    try:
        return run(tuple(args.widths), args.steps, args.redo)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
