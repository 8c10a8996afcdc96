"""Read math problems (question, answer) from a local copy or the Hugging Face hub, in any layout the recipes meet.

Local layouts: an HF ``save_to_disk`` folder (DatasetDict or Dataset), a parquet/JSON/JSONL file, or a folder
holding ``train.parquet``/``test.parquet``. Records may use ``problem``/``question``/``prompt`` (verl chat list)
for the question and ``answer``/``final_answer``/``reward_model.ground_truth``/a boxed ``solution`` for the answer.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_rl.errors import UserError
from precision_rl.reward.extract import last_boxed
from precision_rl.reward.templates import question_from_prompt

DAPO_PREFIX = "Solve the following math problem step by step."
DAPO_SUFFIX = "\n\nRemember to put your answer on its own line after"


@dataclass(frozen=True)
class Problem:
    """One math problem: the bare question and its answer (a string, or a list of acceptable strings)."""

    question: str
    answer: str | list[str]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class HubSource:
    """A dataset on the Hugging Face hub: id, optional config/data file, split, and revision."""

    repo_id: str
    split: str
    config: str | None = None
    data_files: str | None = None
    revision: str | None = None

    def describe(self) -> str:
        """Return a one-line description, e.g. ``hf://HuggingFaceH4/MATH-500 (split test)``."""
        what = f"hf://{self.repo_id}" + (f"/{self.data_files}" if self.data_files else "")
        return what + (f" [{self.config}]" if self.config else "") + f" (split {self.split})" + (
            f" @ {self.revision}" if self.revision else "")


@dataclass
class Loaded:
    """Problems read from a source, plus the provenance the manifest records."""

    problems: list[Problem]
    provenance: dict[str, Any]


def _answer_text(value: Any) -> str | list[str] | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and not isinstance(value, str)):
        items = [str(v).strip() for v in (value.tolist() if hasattr(value, "tolist") else value)]
        items = [i for i in items if i]
        return items or None
    text = str(value).strip()
    return text or None


def _strip_dapo(text: str) -> str:
    if text.startswith(DAPO_PREFIX) and "\n\n" in text:
        text = text.split("\n\n", 1)[1]
        text = text.split(DAPO_SUFFIX)[0]
    return text.strip()


def problem_from_record(rec: dict[str, Any]) -> Problem | None:
    """Return the Problem in one source record, or None when it has no question or no answer."""
    question = rec.get("problem") or rec.get("question")
    if question is None and rec.get("prompt") is not None:
        prompt = rec["prompt"]
        prompt = prompt.tolist() if hasattr(prompt, "tolist") else prompt
        question = question_from_prompt(prompt if isinstance(prompt, str) else [dict(m) for m in prompt])
    if not isinstance(question, str) or not question.strip():
        return None
    answer = None
    for key in ("answer", "final_answer", "ground_truth"):
        if rec.get(key) is not None:
            answer = _answer_text(rec[key])
            break
    if answer is None and isinstance(rec.get("reward_model"), dict):
        answer = _answer_text(rec["reward_model"].get("ground_truth"))
    if answer is None and isinstance(rec.get("solution"), str):
        answer = last_boxed(rec["solution"])
    if answer is None:
        return None
    extra = {k: rec[k] for k in ("level", "type", "subject", "difficulty", "unique_id") if rec.get(k) is not None}
    return Problem(_strip_dapo(question.strip()), answer, extra)


def _records_to_problems(records, where: str) -> list[Problem]:
    problems = [p for p in (problem_from_record(dict(r)) for r in records) if p is not None]
    if not problems:
        raise UserError(f"{where}: no record has both a question (problem/question/prompt) and an answer "
                        "(answer/final_answer/reward_model.ground_truth/boxed solution)")
    return problems


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _pick_split(splits: list[str], wanted: str | None, where: str) -> str:
    for name in (wanted, "train", "test"):
        if name in splits:
            return name
    if len(splits) == 1:
        return splits[0]
    raise UserError(f"{where}: cannot tell which split to use (has {', '.join(splits)}; wanted {wanted})")


def load_local(path: Path, split: str | None = None) -> Loaded:
    """Return the problems at local ``path`` (``split`` picks one split of a multi-split copy)."""
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise UserError(f"source {path} does not exist")
    if path.is_file():
        files = [path]
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            records = pq.read_table(path).to_pylist()
        elif path.suffix in (".jsonl", ".json"):
            text = path.read_text()
            try:
                records = json.loads(text) if path.suffix == ".json" else [json.loads(x) for x in text.splitlines()
                                                                           if x.strip()]
            except json.JSONDecodeError as exc:
                raise UserError(f"source {path}: malformed JSON ({exc})") from None
            if isinstance(records, dict):
                records = [records]
        else:
            raise UserError(f"source {path}: unsupported file type (use .parquet, .jsonl or .json)")
        chosen = None
    elif (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        from datasets import load_from_disk

        try:
            ds = load_from_disk(str(path))
        except Exception as exc:  # noqa: BLE001 - datasets raises many types for a corrupt copy
            raise UserError(f"source {path}: not a readable save_to_disk copy ({type(exc).__name__}: {exc})") from None
        chosen = None
        if hasattr(ds, "keys"):
            chosen = _pick_split(list(ds.keys()), split, str(path))
            ds = ds[chosen]
        records = ds.to_list()
        sub = path / chosen if chosen else path
        files = sorted(sub.glob("*.arrow")) + sorted(sub.glob("*.json"))
    else:
        parquets = {p.stem: p for p in path.glob("*.parquet")}
        if not parquets:
            raise UserError(f"source {path}: no save_to_disk copy (dataset_dict.json/state.json) or parquet files")
        chosen = _pick_split(sorted(parquets), split, str(path))
        return load_local(parquets[chosen], None)
    problems = _records_to_problems(records, str(path))
    provenance = {"kind": "local", "path": str(path), "sha256": _hash_files([f for f in files if f.is_file()]),
                  "rows_read": len(records)}
    if chosen:
        provenance["split"] = chosen
    return Loaded(problems, provenance)


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def load_hub(source: HubSource) -> Loaded:
    """Return the problems of a hub dataset (downloaded through ``datasets``); raise a UserError when unreachable."""
    if _offline():
        raise ConnectionError("HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set")
    from datasets import load_dataset

    kwargs: dict[str, Any] = {"split": source.split, "revision": source.revision}
    if source.data_files:
        ds = load_dataset(source.repo_id, data_files={source.split: source.data_files}, **kwargs)
    else:
        ds = load_dataset(source.repo_id, source.config, **kwargs)
    revision = source.revision
    try:
        from huggingface_hub import HfApi

        revision = HfApi().dataset_info(source.repo_id, revision=source.revision).sha
    except Exception:  # noqa: BLE001 - the resolved commit is nice to have; the requested one is recorded anyway
        pass
    records = ds.to_list()
    return Loaded(_records_to_problems(records, source.describe()),
                  {"kind": "hub", "repo_id": source.repo_id, "config": source.config, "split": source.split,
                   "data_files": source.data_files, "revision": revision, "fingerprint": getattr(ds, "_fingerprint", None),
                   "rows_read": len(records)})
