"""Run directory helpers: identities, attempt files in order, refusal to reuse a directory."""

import json

import pytest

from precision_rl.errors import UserError
from precision_rl.fileio import sha256_file
from precision_rl.launch import runs


def test_run_name_is_derived():
    assert runs.run_name("sanity/grpo", "fp16", 1) == "sanity.grpo-fp16-s1"
    assert runs.run_name("ablation/precision", "train_bf16-infer_fp32", 7) == "ablation.precision-train_bf16-infer_fp32-s7"


def test_attempt_files_sort_numerically(tmp_path):
    for name in ("metrics.attempt10.jsonl", "metrics.jsonl", "metrics.attempt2.jsonl", "metrics.attemptx.jsonl"):
        (tmp_path / name).write_text("")
    assert [p.name for p in runs.attempt_files(tmp_path)] == [
        "metrics.jsonl", "metrics.attempt2.jsonl", "metrics.attempt10.jsonl"]
    assert runs.next_attempt(tmp_path) == 11


def test_create_refuses_existing(tmp_path):
    path = runs.planned_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 1, now=0)
    assert path.name == "s1-19700101T000000Z"
    runs.create_run_dir(path)
    with pytest.raises(UserError, match="already exists"):
        runs.create_run_dir(path)


def test_latest_run_dir_picks_newest(tmp_path):
    for t in (0, 100, 50):
        runs.create_run_dir(runs.planned_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 1, now=t))
    assert runs.latest_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 1).name == "s1-19700101T000140Z"
    assert runs.latest_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 2) is None


def test_a_running_attempt_whose_launcher_is_gone_reads_as_died():
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    record = {**runs.launcher_record(), "pid": gone.pid}
    gone.wait()
    doc = lambda launcher: {"status": "running", "attempts": [{"status": "running", "launcher": launcher}]}  # noqa: E731
    assert runs.effective_status(doc(record)) == runs.DIED
    assert runs.effective_status(doc(runs.launcher_record())) == "running"  # this very process
    assert runs.effective_status(doc({**record, "host": "another-node"})) == "running"  # cannot tell from here
    assert runs.effective_status({"status": "killed", "attempts": []}) == "killed"


def test_model_hashes_fingerprint_a_local_model_and_skip_a_hub_id_and_large_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    hashes = runs.model_hashes(str(tmp_path))
    assert hashes == {"config.json": sha256_file(tmp_path / "config.json"),
                      "model.safetensors": sha256_file(tmp_path / "model.safetensors")}
    assert runs.model_hashes(str(tmp_path), limit=50)["model.safetensors"] is None
    assert runs.model_hashes("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B") is None and runs.model_hashes(None) is None


def test_hardware_names_the_cpu_and_its_matrix_flags():
    info = runs.hardware()
    assert {"cpu_model", "cpu_id", "cpu_count", "matrix_flags", "memory_gib", "gpus"} <= set(info)
    assert isinstance(info["matrix_flags"], list)


def test_the_newest_run_of_a_profile_passes_over_the_other_profile_and_unreadable_manifests(tmp_path):
    parent = runs.arm_dir(tmp_path, "tiny", "sanity/grpo", "fp16")
    for stamp, doc in (("s42-20260101T000000Z", {"scale": "tiny"}),
                       ("s42-20260102T000000Z", {"scale": "tiny", "profile": {"name": "quick"}}),
                       ("s42-20260103T000000Z", None)):
        (parent / stamp).mkdir(parents=True)
        (parent / stamp / runs.MANIFEST).write_text("{" if doc is None else json.dumps(doc))
    newest = runs.latest_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 42)
    assert newest.name == "s42-20260103T000000Z"
    assert runs.latest_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 42, "quick").name == "s42-20260102T000000Z"
    assert runs.latest_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 42, "calibrated").name == "s42-20260101T000000Z"
    assert runs.latest_run_dir(tmp_path, "tiny", "sanity/grpo", "fp16", 7, "quick") is None
