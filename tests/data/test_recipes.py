"""Dataset recipes: the real sanity copy, schema, idempotence, per-template variants, offline and bad sources."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from precision_rl.data.recipes import RECIPES, build, dataset_file
from precision_rl.data.store import read_manifest, read_rows
from precision_rl.errors import UserError
from precision_rl.fileio import sha256_file
from precision_rl.paths import REPO_ROOT, shared_data_dir
from precision_rl.reward.templates import R1_INSTRUCTION


def need_shared(sub: str):
    path = shared_data_dir() / sub
    if not path.exists():
        pytest.skip(f"shared data copy not found at {path} (set PRECISION_RL_SHARED_DATA)")
    return path


def test_real_sanity_copy_converts_to_1460_rows_without_math500_overlap(tmp_path):
    need_shared("train/math_1k5")
    need_shared("evaluation_suite")
    [res] = build("sanity", tmp_path)
    assert res.status == "built"
    rows = read_rows(tmp_path / "sanity" / "train.parquet")
    assert len(rows) == 1460
    row = rows[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert row["data_source"] == "sanity" and row["ability"] == "math"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "0"}
    assert row["prompt"] == [{"role": "user", "content": row["extra_info"]["question"] + " " + R1_INSTRUCTION}]
    assert row["extra_info"]["split"] == "train" and [r["extra_info"]["index"] for r in rows] == list(range(1460))
    assert len({r["extra_info"]["question"] for r in rows}) == 1460
    build("math500", tmp_path)
    math500 = {" ".join(r["extra_info"]["question"].split()) for r in read_rows(tmp_path / "math500" / "test.parquet")}
    assert len(math500) == 500
    assert not math500 & {" ".join(r["extra_info"]["question"].split()) for r in rows}


@pytest.mark.parametrize(("name", "rows", "list_answers"), [
    ("aime24", 30, False), ("amc", 83, False), ("math500", 500, False), ("minerva", 272, True),
    ("olympiadbench", 675, True)])
def test_evaluation_sets_from_the_shared_suite(tmp_path, name, rows, list_answers):
    need_shared("evaluation_suite")
    build(name, tmp_path)
    table = read_rows(tmp_path / name / "test.parquet")
    assert len(table) == rows
    assert {r["data_source"] for r in table} == {name}
    truths = [r["reward_model"]["ground_truth"] for r in table]
    assert all(isinstance(t, list) == list_answers for t in truths)
    if name == "amc":
        assert truths[0] == "142"  # stored as 142.0 in the source
    entry = read_manifest(tmp_path)[name]
    assert entry["files"]["test.parquet"] == {"rows": rows, "sha256": sha256_file(tmp_path / name / "test.parquet")}
    assert entry["source"]["kind"] == "local" and len(entry["source"]["sha256"]) == 64
    example = json.loads((tmp_path / name / f"{name}_example.json").read_text())
    assert example["data_source"] == name


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_rerun_is_a_noop_and_overwrite_rebuilds(tmp_path):
    src = _write_jsonl(tmp_path / "src.jsonl", [{"problem": "What is 1+1?", "answer": "2"}])
    out = tmp_path / "data"
    assert build("aime24", out, src)[0].status == "built"
    target = out / "aime24" / "test.parquet"
    before = (target.stat().st_mtime_ns, sha256_file(target))
    _write_jsonl(src, [{"problem": "What is 2+2?", "answer": "4"}])
    assert build("aime24", out, src)[0].status == "exists"
    assert (target.stat().st_mtime_ns, sha256_file(target)) == before
    assert build("aime24", out, src, overwrite=True)[0].status == "built"
    assert read_rows(target)[0]["reward_model"]["ground_truth"] == "4"
    assert read_manifest(out)["aime24"]["files"]["test.parquet"]["sha256"] == sha256_file(target)
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]


def test_other_templates_get_their_own_folder_and_the_launcher_finds_them(tmp_path):
    src = _write_jsonl(tmp_path / "src.jsonl", [{"question": "Find x.", "final_answer": ["3"]}])
    results = build("math500", tmp_path / "d", src, templates=("r1", "qwen_math"))
    assert [(r.template, r.status) for r in results] == [("qwen_math", "built"), ("r1", "built")]
    default = read_rows(dataset_file(tmp_path / "d", "math500", "test", "qwen_math"))[0]
    variant = read_rows(dataset_file(tmp_path / "d", "math500", "test", "r1"))[0]
    assert dataset_file(tmp_path / "d", "math500", "test", "r1") == tmp_path / "d" / "math500" / "r1" / "test.parquet"
    assert default["prompt"][0] == {"role": "system", "content": R1_INSTRUCTION}
    assert variant["prompt"][0]["content"].endswith("User: Find x.\nAssistant: <think>")
    assert variant["reward_model"]["ground_truth"] == ["3"]
    assert set(read_manifest(tmp_path / "d")) == {"math500", "math500/r1"}


def test_verl_parquet_source_is_reprompted(tmp_path):
    """The sail verl copy has the instruction inside the prompt: the bare question is recovered, not doubled."""
    import pyarrow as pa

    rows = [{"data_source": "x", "prompt": [{"role": "user", "content": f"What is 3*3? {R1_INSTRUCTION}"}],
             "reward_model": {"style": "rule", "ground_truth": "9"}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "math_1460.parquet")
    build("sanity", tmp_path / "d", tmp_path / "math_1460.parquet")
    row = read_rows(tmp_path / "d" / "sanity" / "train.parquet")[0]
    assert row["prompt"][0]["content"] == f"What is 3*3? {R1_INSTRUCTION}"
    assert row["extra_info"]["question"] == "What is 3*3?"


def test_dapo_prompts_are_unwrapped_and_deduplicated(tmp_path):
    wrapped = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\nWhat is 6*7?\n\n"
               "Remember to put your answer on its own line after \"Answer:\"")
    rec = {"prompt": [{"role": "user", "content": wrapped}], "reward_model": {"ground_truth": "42"}}
    build("dapo17k", tmp_path / "d", _write_jsonl(tmp_path / "dapo.jsonl", [rec, rec, rec]))
    rows = read_rows(tmp_path / "d" / "dapo17k" / "train.parquet")
    assert len(rows) == 1 and rows[0]["extra_info"]["question"] == "What is 6*7?"


def test_bad_sources_are_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        build("aime24", tmp_path / "d", tmp_path / "missing")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x", "answer": "1"}\n{not json\n')
    with pytest.raises(UserError, match="malformed JSON"):
        build("aime24", tmp_path / "d", bad)
    empty = _write_jsonl(tmp_path / "empty.jsonl", [{"text": "no question or answer"}])
    with pytest.raises(UserError, match="no record has both"):
        build("aime24", tmp_path / "d", empty)
    with pytest.raises(UserError, match="unknown dataset"):
        build("gsm8k", tmp_path / "d")
    assert not (tmp_path / "d" / "aime24").exists() or not any((tmp_path / "d" / "aime24").iterdir())


def _cli(args, env_extra, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **env_extra}
    return subprocess.run([sys.executable, "-m", "precision_rl", "data", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_offline_without_local_copy_names_the_source_and_the_fix(tmp_path):
    env = {"PRECISION_RL_SHARED_DATA": str(tmp_path / "nothing"), "PRECISION_RL_DATA": str(tmp_path / "d"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    named = _cli(["aime24"], env, tmp_path)
    assert named.returncode == 2
    err = named.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: aime24: no source reachable")
    assert "hf://HuggingFaceH4/aime_2024" in err[0] and "SOURCE=" in err[0] and str(tmp_path / "nothing") in err[0]
    everything = _cli([], env, tmp_path)  # `make data`: reports each unreachable set, builds the rest, exits 0
    assert everything.returncode == 0, everything.stderr
    reported = [line.split()[1] for line in everything.stdout.splitlines() if line.startswith("unavailable")]
    assert sorted(reported) == sorted(n for n, r in RECIPES.items() if not r.explicit_only)
    assert not (tmp_path / "d").exists() or not list((tmp_path / "d").rglob("*.parquet"))
