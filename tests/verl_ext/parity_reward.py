"""A reward function for the end-to-end tests, loaded by verl through its custom-reward hook.

An untrained model answers nothing correctly, so the grader would give every response 0 and GRPO no signal; this
reward scores a response 1 when its text has an even length, which gives every group a spread of rewards. Each call
appends the response and what verl told it about truncation to ``$PRECISION_RL_TEST_REWARD_LOG`` (one JSON line), so
a test can check what was generated and that the flag reaches the reward function.
"""

from __future__ import annotations

import json
import os


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """Return 1.0 for an even-length response, else 0.0 (and log the truncation flag)."""
    log = os.environ.get("PRECISION_RL_TEST_REWARD_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps({"truncated": (extra_info or {}).get("truncated"), "response": solution_str}) + "\n")
    return float(len(solution_str) % 2 == 0)
