"""The shipped tiny base model: its checksums hold, a missing or changed file is one clear error that names it and
changes nothing, it is the build of the code's recipe, and its tokenizer still encodes fixed texts to the committed
ids."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from precision_rl import cli
from precision_rl.errors import UserError
from precision_rl.fileio import sha256_file
from precision_rl.tiny import pretrain
from precision_rl.tiny.pretrain import BUILD_RECORD, PretrainConfig, build_record, model_path, shipped_model
from precision_rl.tiny.shipped import (
    CHECKSUMS_FILE,
    SHIPPED_DIR,
    WEIGHTS_FILE,
    folder_checksums,
    recorded_checksums,
    verify,
    weights_sha256,
    write_checksums,
)

TOKENIZER_IDS = Path(__file__).with_name("tokenizer_ids.json")
MAX_FILE_BYTES = 16 * 2**20  # the largest file the repository takes


def test_every_shipped_file_matches_its_recorded_checksum():
    recorded = recorded_checksums()
    assert recorded == folder_checksums(SHIPPED_DIR), "a file of the shipped model is not listed, or changed"
    assert {WEIGHTS_FILE, BUILD_RECORD, "config.json", "tokenizer.json"} <= set(recorded)
    assert verify() == SHIPPED_DIR and weights_sha256() == sha256_file(SHIPPED_DIR / WEIGHTS_FILE)
    assert all(p.stat().st_size <= MAX_FILE_BYTES for p in SHIPPED_DIR.iterdir())


def test_the_shipped_model_is_the_build_of_the_codes_recipe():
    record = build_record(SHIPPED_DIR)
    assert record["key"] == PretrainConfig().key() and record["config"]["sft_dtype"] == "float32"
    assert shipped_model() == SHIPPED_DIR == model_path("tiny")
    assert pretrain.ensure_tiny_model() == SHIPPED_DIR  # the default recipe is never built on use


@pytest.fixture
def copy_of_the_model(tmp_path) -> Path:
    folder = tmp_path / "base_model"
    shutil.copytree(SHIPPED_DIR, folder)
    return folder


def test_a_corrupted_file_is_one_line_naming_it_and_both_checksums(copy_of_the_model):
    weights = copy_of_the_model / WEIGHTS_FILE
    expected = sha256_file(weights)
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError) as caught:
        verify(copy_of_the_model)
    message = str(caught.value)
    assert "\n" not in message and WEIGHTS_FILE in message
    assert expected in message and sha256_file(weights) in message
    assert weights.read_bytes() == bytes(data), "the check changed the file"


def test_a_missing_file_or_list_is_one_line(copy_of_the_model):
    (copy_of_the_model / "tokenizer.json").unlink()
    with pytest.raises(UserError, match="tokenizer.json is missing"):
        verify(copy_of_the_model)
    (copy_of_the_model / CHECKSUMS_FILE).unlink()
    with pytest.raises(UserError, match=f"{CHECKSUMS_FILE} is missing"):
        verify(copy_of_the_model)


def test_a_malformed_checksum_line_names_its_line(copy_of_the_model):
    listing = copy_of_the_model / CHECKSUMS_FILE
    listing.write_text(listing.read_text() + "not-a-checksum\n")
    with pytest.raises(UserError, match=rf"{CHECKSUMS_FILE}:\d+: not a"):
        recorded_checksums(copy_of_the_model)


def test_written_checksums_read_back(tmp_path):
    (tmp_path / WEIGHTS_FILE).write_bytes(b"weights")
    (tmp_path / "config.json").write_text("{}")
    write_checksums(tmp_path)
    assert recorded_checksums(tmp_path) == folder_checksums(tmp_path)
    assert (tmp_path / CHECKSUMS_FILE).read_text().splitlines()[0].endswith(f"  {'config.json'}")


def test_a_run_refuses_a_corrupted_shipped_model(copy_of_the_model, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pretrain, "SHIPPED_DIR", copy_of_the_model)
    (copy_of_the_model / "config.json").write_text("{}")
    monkeypatch.setenv("PRECISION_RL_RUNS", str(tmp_path / "runs"))
    assert cli.main(["run", "sanity/grpo", "--scale", "tiny", "--precision", "fp16", "--dry-run"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "config.json: sha256" in errors[0]
    assert not (tmp_path / "runs").exists()


def test_make_tiny_model_without_a_flag_refuses_in_one_line(capsys):
    before = folder_checksums(SHIPPED_DIR)
    assert cli.main(["tiny-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "REBUILD=1" in err[0] and weights_sha256()[:12] in err[0]
    assert folder_checksums(SHIPPED_DIR) == before


def test_the_tokenizer_encodes_fixed_texts_to_the_committed_ids():
    """The tokenizer is part of the instrument: the same files loaded by another tokenizers/transformers version
    may split text differently (seen: " 3" as two tokens). verl and vLLM load it through AutoTokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_DIR)
    expected = json.loads(TOKENIZER_IDS.read_text())
    assert expected["weights_sha256"] == weights_sha256(), "tokenizer_ids.json belongs to another shipped model"
    for case in expected["texts"]:
        assert tokenizer(case["text"], add_special_tokens=False)["input_ids"] == case["ids"], case["text"]
    chat = tokenizer.apply_chat_template([{"role": "user", "content": expected["chat"]["user"]}], tokenize=False,
                                         add_generation_prompt=True)
    assert tokenizer(chat, add_special_tokens=False)["input_ids"] == expected["chat"]["ids"]


def test_every_loader_of_the_tokenizer_file_agrees():
    """transformers loads a Qwen2 model's tokenizer as Qwen2Tokenizer, which installs its own normalizer and
    pre-tokenizer; the shipped file carries the same ones, so the tokenizers library reading the file alone (as an
    older or newer transformers might) gives the same ids."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(SHIPPED_DIR)
    raw = Tokenizer.from_file(str(SHIPPED_DIR / "tokenizer.json"))
    for case in json.loads(TOKENIZER_IDS.read_text())["texts"]:
        assert raw.encode(case["text"], add_special_tokens=False).ids == case["ids"], case["text"]
    assert json.loads(loaded.backend_tokenizer.to_str())["pre_tokenizer"] == json.loads(raw.to_str())["pre_tokenizer"]


def test_rebuild_keeps_identical_bytes_and_records_the_rebuild(copy_of_the_model, monkeypatch, tmp_path):
    """A rebuild that gives the shipped bytes leaves them and appends itself to the build record (the SFT is
    replaced by copying the shipped weights, so the test checks the bookkeeping, not the training)."""
    monkeypatch.setattr(pretrain, "SHIPPED_DIR", copy_of_the_model)
    monkeypatch.setenv("PRECISION_RL_CACHE", str(tmp_path / "cache"))

    def fake_build(out_dir, config, progress=True):
        shutil.copytree(copy_of_the_model, out_dir)
        record = {**build_record(copy_of_the_model), "built": "now", "seconds": 1.0}
        record.pop("rebuilds", None)
        (Path(out_dir) / BUILD_RECORD).write_text(json.dumps(record))
        write_checksums(out_dir)
        return Path(out_dir)

    monkeypatch.setattr(pretrain, "build_tiny_model", fake_build)
    weights = sha256_file(copy_of_the_model / WEIGHTS_FILE)
    result = pretrain.rebuild_shipped_model()
    assert result["identical"] and result["max_abs_weight_difference"] == 0.0
    assert sha256_file(copy_of_the_model / WEIGHTS_FILE) == weights
    assert build_record(copy_of_the_model)["rebuilds"][-1]["built"] == "now"
    verify(copy_of_the_model)
    assert not list((tmp_path / "cache" / "tiny-model").glob("rebuild-*"))


def test_a_rebuild_with_other_bytes_replaces_the_folder_and_says_what_it_replaced(copy_of_the_model, monkeypatch,
                                                                                   tmp_path):
    from safetensors.torch import load_file, save_file

    monkeypatch.setattr(pretrain, "SHIPPED_DIR", copy_of_the_model)
    monkeypatch.setenv("PRECISION_RL_CACHE", str(tmp_path / "cache"))
    old_weights = sha256_file(copy_of_the_model / WEIGHTS_FILE)

    def fake_build(out_dir, config, progress=True):
        shutil.copytree(copy_of_the_model, out_dir)
        tensors = load_file(Path(out_dir) / WEIGHTS_FILE)
        name = sorted(tensors)[0]
        tensors[name] = tensors[name] + 0.25
        save_file(tensors, Path(out_dir) / WEIGHTS_FILE, metadata={"format": "pt"})
        record = {**build_record(copy_of_the_model), "built": "now"}
        (Path(out_dir) / BUILD_RECORD).write_text(json.dumps(record))
        write_checksums(out_dir)
        return Path(out_dir)

    monkeypatch.setattr(pretrain, "build_tiny_model", fake_build)
    result = pretrain.rebuild_shipped_model()
    assert not result["identical"] and result["differing_files"] == [WEIGHTS_FILE]
    assert result["max_abs_weight_difference"] == pytest.approx(0.25)
    assert verify(copy_of_the_model) and sha256_file(copy_of_the_model / WEIGHTS_FILE) != old_weights
    assert build_record(copy_of_the_model)["replaces"]["weights_sha256"] == old_weights


def test_the_decoder_linear_shapes_cover_every_linear_weight_of_the_shipped_model():
    from safetensors.torch import load_file

    from precision_rl.tiny.model import decoder_linear_shapes, decoder_linear_slices

    shapes = decoder_linear_shapes(SHIPPED_DIR)
    weights = {name: w for name, w in load_file(SHIPPED_DIR / WEIGHTS_FILE).items()
               if w.dim() == 2 and "embed" not in name and "lm_head" not in name}
    assert sum(i * o for i, o in shapes) == sum(w.numel() for w in weights.values())
    assert sorted({i for i, _ in shapes}) == sorted({w.shape[1] for w in weights.values()})
    unfused = sorted(tuple(w.shape) for w in weights.values())
    assert unfused == sorted((o, i) for i, slices in decoder_linear_slices(SHIPPED_DIR) for o in slices)
