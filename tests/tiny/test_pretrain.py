import json
import math

from transformers import AutoModelForCausalLM, AutoTokenizer

from precision_rl.tiny import pretrain
from precision_rl.tiny.pretrain import BUILD_RECORD, PretrainConfig, build_record, sft

STEPS = 3


def _sft(path, progress: bool) -> list[float]:
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    return sft(model, tokenizer, PretrainConfig(problems=50, steps=STEPS, batch_size=2, warmup=1), progress)


def test_sft_returns_one_finite_loss_per_step_and_reports_progress_outside_a_terminal(tiny_random_model, capsys,
                                                                                     monkeypatch):
    # An interval longer than any run here: a loaded machine's slow steps cannot add reports of their own.
    monkeypatch.setattr(pretrain, "PROGRESS_INTERVAL_S", 3600.0)
    losses = _sft(tiny_random_model, progress=True)
    assert len(losses) == STEPS and all(math.isfinite(x) for x in losses)
    err = capsys.readouterr().err
    assert "tiny model SFT" in err and f"{STEPS}/{STEPS}" in err
    assert err.count("tiny model SFT") <= 2, "outside a terminal the bar reports at most every PROGRESS_INTERVAL_S"


def test_sft_is_silent_without_progress(tiny_random_model, capsys):
    _sft(tiny_random_model, progress=False)
    assert "tiny model SFT" not in capsys.readouterr().err


def test_the_build_record_is_read_from_a_built_model_only(tmp_path):
    assert build_record(tmp_path) is None
    (tmp_path / BUILD_RECORD).write_text(json.dumps({"key": "abc", "final_loss": 0.5}))
    assert build_record(tmp_path) == {"key": "abc", "final_loss": 0.5}
    assert build_record(str(tmp_path)) == build_record(tmp_path)
