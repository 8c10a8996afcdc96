"""What a mismatch run measures: dtype and pair parsing, validation, model slugs, CLI glue."""

import pytest

from precision_rl import paths
from precision_rl.cli import main
from precision_rl.config.precision import PrecisionArm
from precision_rl.errors import UserError
from precision_rl.mismatch import run as mismatch_run
from precision_rl.mismatch.config import (
    MismatchConfig,
    model_slug,
    pair_dirname,
    parse_dtypes,
    parse_pairs,
    tiny_ops,
)


def test_dtypes_and_pairs():
    assert parse_dtypes("bf16 fp16") == ("bf16", "fp16")
    assert parse_dtypes("bf16,fp16 bf16") == ("bf16", "fp16")
    with pytest.raises(UserError, match="fp8"):
        parse_dtypes("bf16 fp8")
    dtypes = ("bf16", "fp16")
    assert [pair_dirname(a) for a in parse_pairs("self", dtypes)] == ["bf16-bf16", "fp16-fp16"]
    assert [pair_dirname(a) for a in parse_pairs("all", dtypes)] == ["bf16-bf16", "fp16-fp16", "bf16-fp16",
                                                                     "fp16-bf16"]
    assert [pair_dirname(a) for a in parse_pairs("fp32-bf16", dtypes)][-1] == "fp32-bf16"
    with pytest.raises(UserError, match="train-infer"):
        parse_pairs("bf16", dtypes)


def test_samples_once_per_infer_dtype_and_adds_the_fp32_reference():
    dtypes = ("bf16", "fp16")
    cfg = MismatchConfig(model="m", dtypes=dtypes, pairs=parse_pairs("all", dtypes))
    assert cfg.rollouts == (("fp16", "fp16"), ("bf16", "bf16"))
    assert cfg.train_dtypes_for(("bf16", "bf16")) == ("bf16", "fp16", "fp32")
    assert MismatchConfig(model="m", dtypes=("fp32",), pairs=(PrecisionArm("fp32", "fp32"),)).train_dtypes_for(
        ("fp32", "fp32")) == ("fp32",)
    assert cfg.scale == "tiny" and MismatchConfig(model="m", device="cuda").scale == "paper"


def test_a_quantized_rollout_samples_once_per_engine_dtype_on_a_cpu_only():
    pairs = parse_pairs("fp16-fp8_e4m3,bf16-fp8_e4m3,fp16-fp4_e2m1", ("fp16",))
    cfg = MismatchConfig(model="m", dtypes=("fp16",), pairs=pairs)
    assert cfg.rollouts == (("fp16", "fp16"), ("fp8_e4m3", "fp16"), ("fp8_e4m3", "bf16"), ("fp4_e2m1", "fp16"))
    assert cfg.train_dtypes_for(("fp8_e4m3", "bf16")) == ("bf16", "fp32")
    with pytest.raises(UserError, match="fp8_e4m3.*measured on a CPU only"):
        MismatchConfig(model="m", dtypes=("fp16",), pairs=pairs[:2], device="cuda")
    with pytest.raises(UserError, match="training precision"):
        parse_pairs("fp8_e4m3-fp16", ("fp16",))


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, ">= 1"), ({"train_mode": "ddp"}, "training-engine mode"), ({"exact_kl": "maybe"}, "exact KL"),
    ({"temperature": 0.0}, "temperature"), ({"top_p": 0.95}, "top_p"), ({"dtypes": ()}, "empty"),
])
def test_bad_config_is_one_clear_error(kwargs, message):
    with pytest.raises(UserError, match=message):
        MismatchConfig(model="m", **kwargs)


def test_model_slug(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    (paths.tiny_models_root() / "069b75dd4af7").mkdir(parents=True)
    assert model_slug(str(paths.tiny_models_root() / "069b75dd4af7")) == "tiny-069b75dd4af7"
    (tmp_path / "tiny-sft").mkdir()
    assert model_slug(str(tmp_path / "tiny-sft")) == "tiny-sft"
    assert model_slug("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B") == "deepseek-ai--DeepSeek-R1-Distill-Qwen-1.5B"


def test_cli_prints_scale_and_result_dir(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake(cfg, argv=None):
        seen["cfg"] = cfg
        return {"bf16-bf16": tmp_path / "m" / "bf16-bf16"}

    monkeypatch.setattr(mismatch_run, "run_mismatch", fake)
    assert main(["mismatch", "--model", "m", "--dtypes", "bf16", "--n", "3", "--device", "cpu",
                 "--train-mode", "pure"]) == 0
    assert capsys.readouterr().out == f"tiny\t{tmp_path / 'm'}\n"
    cfg = seen["cfg"]
    assert (cfg.n, cfg.dtypes, cfg.train_mode, cfg.max_tokens) == (3, ("bf16",), "pure", 128)


def test_missing_data_and_model_are_clear_errors(tiny_random_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRECISION_RL_RUNS", str(tmp_path))
    assert main(["mismatch", "--model", str(tiny_random_model), "--data", str(tmp_path / "nope.parquet"),
                 "--device", "cpu"]) == 2
    assert "nope.parquet" in capsys.readouterr().err
    bad = tmp_path / "bad.parquet"
    __import__("pandas").DataFrame({"question": ["1+1"]}).to_parquet(bad)
    assert main(["mismatch", "--model", str(tiny_random_model), "--data", str(bad), "--device", "cpu"]) == 2
    assert "no 'prompt' column" in capsys.readouterr().err
    assert main(["mismatch", "--model", str(tmp_path / "no-model"), "--device", "cpu"]) == 2
    assert f"MODEL '{tmp_path / 'no-model'}' is no model folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["mismatch", "--model", str(tmp_path / "empty"), "--device", "cpu"]) == 2
    assert "cannot load model" in capsys.readouterr().err
    assert main(["mismatch", "--model", str(tiny_random_model), "--max-tokens", "5000", "--device", "cpu"]) == 2
    assert "exceeds the model's 512 positions" in capsys.readouterr().err
    assert not any(tmp_path.rglob("summary.json"))


def test_gpu_defaults_cover_the_papers_long_sequences():
    """Fig. 5's sequences reach ~26K tokens: the GPU default budget must allow them (the CPU one stays small)."""
    import argparse

    from precision_rl.config.registry import INSTRUMENT_EXPERIMENT, load_experiment

    parser = argparse.ArgumentParser()
    mismatch_run.add_parser(parser.add_subparsers())
    gpu = mismatch_run.config_from_args(parser.parse_args(["mismatch", "--device", "cuda"]))
    sanity_prompt_limit = load_experiment(INSTRUMENT_EXPERIMENT).hyper.max_prompt_length
    assert gpu.max_tokens >= 26_000 and gpu.max_model_len == gpu.max_tokens + sanity_prompt_limit
    cpu = mismatch_run.config_from_args(parser.parse_args(["mismatch", "--device", "cpu", "--model", "local/tiny"]))
    assert cpu.max_tokens == 128


def test_generated_prompt_specs():
    assert tiny_ops("tiny") == (2, 3) and tiny_ops("tiny:2-24") == (2, 24) and tiny_ops("sanity") is None
    for bad in ("tiny:24-2", "tiny:0-3", "tiny:2", "tiny:a-b"):
        with pytest.raises(UserError, match="bad generated-prompt spec"):
            MismatchConfig(model="m", data=bad)
