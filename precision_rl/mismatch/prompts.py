"""The prompts to sample from, as token ids rendered with the model's chat template."""

from __future__ import annotations

from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.mismatch.config import TINY_DATA, tiny_ops


def tiny_messages(num_prompts: int, seed: int, ops: tuple[int, int]) -> list[list[dict]]:
    """Return ``num_prompts`` generated arithmetic problems of ``ops`` (min, max) operations as single-turn chat
    lists (the tiny sanity prompts for the tiny recipe's range)."""
    from precision_rl.tiny.problems import make_problems, user_message

    problems = make_problems(num_prompts, seed=seed, min_ops=ops[0], max_ops=ops[1])
    return [[{"role": "user", "content": user_message(p)}] for p in problems]


def data_path(data: str) -> Path:
    """Return the parquet file ``data`` names: a path, or a recipe name under the data root (its test split)."""
    from precision_rl.paths import data_root

    candidates = [Path(data)] + [data_root() / data / f"{split}.parquet" for split in ("test", "train")]
    for path in candidates:
        if path.is_file():
            return path
    raise UserError(f"data {data!r} not found: give a parquet file with a 'prompt' chat column, a recipe name "
                    f"under {data_root()} (run its data recipe first), or '{TINY_DATA}' / '{TINY_DATA}:<min ops>-<max ops>'")


def parquet_messages(path: Path, num_prompts: int) -> list[list[dict]]:
    """Return the first ``num_prompts`` chat lists of the ``prompt`` column of a verl-schema parquet."""
    import pandas as pd

    frame = pd.read_parquet(path)
    if "prompt" not in frame.columns:
        raise UserError(f"{path}: no 'prompt' column (verl row schema expected: prompt = list of chat messages)")
    out = []
    for i, value in enumerate(frame["prompt"].head(num_prompts)):
        messages = [dict(m) for m in value] if value is not None else []
        if not messages or not all({"role", "content"} <= set(m) for m in messages):
            raise UserError(f"{path}: row {i}: 'prompt' must be a list of {{role, content}} messages")
        out.append(messages)
    if not out:
        raise UserError(f"{path}: no rows")
    return out


def prompt_token_ids(tokenizer, data: str, num_prompts: int, seed: int) -> list[list[int]]:
    """Return one token id list per prompt, rendered with the chat template (generation prompt added)."""
    ops = tiny_ops(data)
    messages = tiny_messages(num_prompts, seed, ops) if ops else parquet_messages(data_path(data), num_prompts)
    if not getattr(tokenizer, "chat_template", None):
        raise UserError("the model's tokenizer has no chat template")
    out = []
    for chat in messages:
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out.append([int(t) for t in ids])
    return out
