"""The offline dose of the synthetic mismatch: no noise carries none, noise carries a positive KL that grows with its
strength, the same seed measures the same, and bad input ends in one line without overwriting anything."""

import json

import pytest

from precision_rl.data.recipes import Recipe, dataset_file, write_dataset
from precision_rl.data.sources import Problem
from precision_rl.mismatch import synthetic_dose as D
from precision_rl.tiny import data as tiny_data
from precision_rl.tiny.problems import make_problems
from precision_rl.tiny.shipped import SHIPPED_DIR


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    root = tmp_path_factory.mktemp("dose")
    rows = [Problem(p.question, p.answer) for p in make_problems(4, seed=3)]
    write_dataset(Recipe(tiny_data.TRAIN_RECIPE, "test set", "train", tiny_data.TEMPLATE), rows, {"test": True}, root)
    return dataset_file(root, tiny_data.TRAIN_RECIPE, "train", tiny_data.TEMPLATE)


def _settings(parquet) -> D.DoseSettings:
    return D.DoseSettings(str(SHIPPED_DIR), str(parquet), prompts=4, n=4, temperature=1.0, max_tokens=12, seed=42)


def test_no_noise_carries_no_mismatch_and_more_noise_carries_more(parquet):
    clean, weak, strong = D.measure(_settings(parquet), (0.0, 1.0, 3.0), progress=lambda line: None)
    assert clean.sequence_kl == 0 and clean.sequence_kl_k3 == 0 and clean.sequences == 16
    assert 0 < weak.sequence_kl_k3 < strong.sequence_kl_k3
    assert 0 < strong.sequence_kl and 0 <= clean.accuracy <= 1
    again = D.measure(_settings(parquet), (1.0,), progress=lambda line: None)[0]
    assert again == weak


def test_the_tool_writes_its_settings_and_never_overwrites(parquet, tmp_path, capsys):
    out = tmp_path / "dose.json"
    argv = ["--sigmas", "1", "--data", str(parquet), "--prompts", "2", "--n", "2", "--max-tokens", "4", "--out", str(out)]
    assert D.main(argv) == 0
    written = json.loads(out.read_text())
    assert written["settings"]["model"] == "precision_rl/tiny/base_model", "a record names a repository folder relatively"
    assert written["settings"]["prompts"] == 2 and [p["sigma"] for p in written["points"]] == [1.0]
    assert written["command"][-len(argv):] == argv and "cpu" in json.dumps(written["hardware"]).lower()
    before = out.read_text()
    assert D.main(argv) == 2
    assert out.read_text() == before
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize("sigmas", ["-1", "a,b", ""])
def test_a_bad_strength_is_one_line_listing_what_is_accepted(sigmas, tmp_path, capsys):
    assert D.main(["--sigmas", sigmas, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "comma-separated strengths >= 0" in err[0]


@pytest.mark.parametrize("folder", ["missing", "empty", "corrupt"])
def test_a_folder_that_holds_no_loadable_model_is_one_line(folder, parquet, tmp_path, capsys):
    model = tmp_path / folder
    if folder != "missing":
        model.mkdir()
    if folder == "corrupt":
        (model / "config.json").write_text("{not json")
    argv = ["--model", str(model), "--data", str(parquet), "--prompts", "1", "--n", "1", "--out", str(tmp_path / "x.json")]
    assert D.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(model) in err[0]
    assert not (tmp_path / "x.json").exists()
