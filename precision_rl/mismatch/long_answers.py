"""The long-answer study: the offline mismatch of a tiny model whose own answers run to hundreds of tokens.

The tiny model ends its answers after ~39 tokens, and forcing it on (``make mismatch-length``, ``--ignore-eos``)
takes it out of its training distribution. This study's model is the tiny recipe SFT-trained on chains of
2-24 operations instead of 2-3 (responses of ~20 to ~250 tokens; ``LONG_ANSWER_RECIPE``), and is
sampled on prompts of the same range: every response ends where the model ends it, so the sequence-level mismatch
against response length is Fig. 5's at natural lengths. ``python -m precision_rl.mismatch.long_answers``
(``make mismatch-long``); an existing result is kept.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from precision_rl.errors import UserError
from precision_rl.mismatch.config import TINY_DATA
from precision_rl.mismatch.layout import existing_result
from precision_rl.mismatch.width import measure
from precision_rl.tiny.pretrain import LONG_ANSWER_RECIPE, LONG_ANSWER_TOKENS, PretrainConfig, ensure_tiny_model

LONG_OPS = (LONG_ANSWER_RECIPE.min_ops, LONG_ANSWER_RECIPE.max_ops)
MAX_TOKENS = LONG_ANSWER_TOKENS[1]
NUM_PROMPTS, SAMPLES = 32, 4  # 128 responses spread over the whole length range
RESULT_NAME = "tiny-long"


def long_config(steps: int = LONG_ANSWER_RECIPE.steps) -> PretrainConfig:
    """Return the SFT recipe of the study's model: the long-answer recipe with ``steps`` SFT steps."""
    return replace(LONG_ANSWER_RECIPE, steps=steps)


def run(steps: int = LONG_ANSWER_RECIPE.steps) -> int:
    """Build the study's model and measure its mismatch at natural lengths (bf16 and fp16 self pairs); return the
    exit status."""
    if found := existing_result(RESULT_NAME):
        print(f"{RESULT_NAME}: results exist in {found}, skipped", flush=True)
        return 0
    model = ensure_tiny_model(long_config(steps))
    return measure(model, RESULT_NAME, ("--data", f"{TINY_DATA}:{LONG_OPS[0]}-{LONG_OPS[1]}",
                                        "--max-tokens", str(MAX_TOKENS), "--num-prompts", str(NUM_PROMPTS),
                                        "--n", str(SAMPLES), "--exact-kl", "on"))


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the study; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=LONG_ANSWER_RECIPE.steps, help="SFT steps of the study's model")
    args = p.parse_args(argv)
    try:
        return run(args.steps)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
