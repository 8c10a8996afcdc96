"""Offline training-inference mismatch (the paper's Fig. 5): vLLM samples (mu) vs HF teacher-forced recompute (pi).

Modules: ``config`` (what to run), ``prompts`` (prompt token ids), ``sampling`` (vLLM, mu), ``recompute``
(HF, pi), ``metrics`` (summary numbers), ``outputs`` (result directories), ``run`` (CLI glue), ``bench``.
"""
