"""The files of one offline mismatch result, ``<root>/mismatch/<model slug>/<train>-<infer>/`` (no heavy imports:
the analysis side reads this layout too).

The tool writes the tables as parquet; a published copy (``results/logs/mismatch/``, committed) holds the same
tables as CSV text. Readers take whichever is there.
"""

from __future__ import annotations

from pathlib import Path

from precision_rl.paths import mismatch_roots

TOKENS, SEQUENCES = "tokens.parquet", "sequences.parquet"
TOKENS_CSV, SEQUENCES_CSV = "tokens.csv", "sequences.csv"
SUMMARY, MANIFEST = "summary.json", "manifest.json"
FORMATS_RESULT = "ladder-formats"  # the ladder's real rungs measured offline (``precision_rl.mismatch.formats``)
EXACT_KL = "exact_kl"  # the tokens table's full-vocabulary KL(μ‖π) per token (when μ was sampled with every logprob)


def existing_result(model_slug: str) -> Path | None:
    """Return the folder of the result ``model_slug`` in runs/mismatch or among the published copies (None where
    neither holds it)."""
    return next((root / model_slug for root in mismatch_roots() if (root / model_slug).is_dir()), None)
