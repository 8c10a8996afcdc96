"""The files of one offline mismatch result, ``<root>/mismatch/<model slug>/<train>-<infer>/`` (no heavy imports:
the analysis side reads this layout too).

The tool writes the tables as parquet; a published copy (``results/logs/mismatch/``, committed) holds the same
tables as CSV text. Readers take whichever is there.
"""

TOKENS, SEQUENCES = "tokens.parquet", "sequences.parquet"
TOKENS_CSV, SEQUENCES_CSV = "tokens.csv", "sequences.csv"
SUMMARY, MANIFEST = "summary.json", "manifest.json"
