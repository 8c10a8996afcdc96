"""experiments/ladder/README.md's table of synthetic doses: generated from the committed calibration and the registry."""

import json

import pytest

from precision_rl.analysis import synthetic_doses
from precision_rl.config import registry
from precision_rl.errors import UserError


def _calibration(tmp_path, sigmas_kl: dict[float, float]):
    points = [{"sigma": s, "sequences": 1024, "sequence_kl": kl, "sequence_kl_sem": kl / 20, "sequence_kl_k3": kl * 0.9,
               "accuracy": 0.5 - s / 10} for s, kl in sigmas_kl.items()]
    doses = {"settings": {"prompts": 64, "n": 16, "temperature": 1.0, "max_tokens": 64},
             "command": ["python", "-m", "precision_rl.mismatch.synthetic_dose", "--sigmas", "0,1"],
             "hardware": {"cpu_count": 2, "cpu_model": "Some CPU", "cpu_id": "family 1"}, "points": points}
    path = tmp_path / "dose.json"
    path.write_text(json.dumps(doses))
    return path


def test_the_ladder_readme_s_dose_table_is_what_the_committed_calibration_and_the_registry_give_now():
    readme = registry.EXPERIMENTS_DIR / "ladder" / "README.md"
    body = synthetic_doses.dose_section(synthetic_doses.read_doses(), synthetic_doses.rungs_by_sigma())
    assert synthetic_doses.BLOCK.render(body) in readme.read_text(), \
        "experiments/ladder/README.md's dose table is stale: run `make published-results`"


def test_the_registry_s_rungs_are_grouped_by_strength_and_controls_are_left_to_their_rung():
    rungs = synthetic_doses.rungs_by_sigma()
    assert ("ladder/synthetic_s3", "grpo") in rungs[3.0]
    assert ("ladder/synthetic_s1p5_pg_seq_is", "pg_seq_is") in rungs[1.5]
    assert ("ladder/synthetic_s0p5_pg_seq_is", "pg_seq_is") in rungs[0.5]
    assert ("ladder/synthetic_s0p7_pg_seq_is", "pg_seq_is") in rungs[0.7]
    assert not any(name.endswith("_control") for names in rungs.values() for name, _ in names)


def test_a_row_per_strength_the_paper_s_bf16_level_placed_and_an_uncalibrated_strength_flagged(tmp_path):
    doses = synthetic_doses.read_doses(_calibration(tmp_path, {0.0: 0.0, 1.0: 0.5, 2.0: 3.0, 3.0: 12.0}))
    body = synthetic_doses.dose_section(doses, {1.0: [("ladder/a", "grpo")], 4.0: [("ladder/b", "gspo")]})
    rows = [line for line in body.splitlines() if line.startswith("| ")][1:]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2", "3", "4"], "σ = 0 is no rung"
    assert "`ladder/a` (GRPO)" in rows[0] and "0.50 ± 0.03" in rows[0]
    assert "(none yet)" in rows[1] and "12.0 ± 0.60" in rows[2]
    assert "not calibrated" in rows[3] and "`ladder/b` (GSPO)" in rows[3]
    assert "lies between σ = 2 and σ = 3" in body and "scores 0.500 there" in body
    above = synthetic_doses.dose_section(synthetic_doses.read_doses(_calibration(tmp_path, {1.0: 0.5})), {})
    assert "lies above every calibrated strength" in above


@pytest.mark.parametrize("content", ["not json", json.dumps({"settings": {}}),
                                     json.dumps({"points": [{"sigma": 1.0, "sequence_kl": 0.4}]})])
def test_a_bad_calibration_file_is_one_line_and_the_readme_is_left_alone(tmp_path, capsys, content):
    bad = tmp_path / "dose.json"
    bad.write_text(content)
    with pytest.raises(UserError):
        synthetic_doses.read_doses(bad)
    readme = tmp_path / "README.md"
    readme.write_text(synthetic_doses.BLOCK.render("old"))
    assert synthetic_doses.main(["--doses", str(bad), "--readme", str(readme)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert readme.read_text() == synthetic_doses.BLOCK.render("old")
    with pytest.raises(UserError, match="make synthetic-dose"):
        synthetic_doses.read_doses(tmp_path / "absent.json")
