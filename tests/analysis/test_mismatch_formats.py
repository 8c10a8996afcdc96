"""The ladder's real rungs offline: which pairs are measured, how the result is published, tabulated and kept out of
Fig. 5."""

from __future__ import annotations

import json

import numpy as np

from precision_rl.analysis.mismatch_formats import formats_markdown, formats_table
from precision_rl.analysis.mismatch_results import load_offline, publish_mismatch
from precision_rl.analysis.synthetic import write_mismatch_result
from precision_rl.config.registry import load_experiment
from precision_rl.mismatch.formats import rung_pairs, rung_specs, tool_arguments, training_prompts
from precision_rl.mismatch.layout import FORMATS_RESULT, SUMMARY


def test_the_measured_pairs_are_the_ladder_s_real_rungs_on_their_training_prompts():
    specs = rung_specs()
    pairs = rung_pairs(specs)
    ladder = [(a.train, a.infer) for a in load_experiment("ladder/grpo", "tiny").arms]
    assert sorted(pairs) == sorted([*ladder, ("fp16", "fp16")])  # the FP16 rung is sanity/grpo's FP16 arm
    assert not any(spec.hyper.rollout_logit_noise for spec in specs)
    own, extra = tool_arguments(pairs, training_prompts(specs))
    assert own == ("fp16",)
    crossed = extra[extra.index("--pairs") + 1].split(",")
    assert sorted(crossed) == sorted(f"{t}-{i}" for t, i in ladder)
    assert extra[extra.index("--data") + 1].endswith("tiny_sanity/train.parquet")


def _formats_result(root, kl_by_pair):
    rng = np.random.default_rng(0)
    for (train, infer), kl in kl_by_pair.items():
        out = write_mismatch_result(root, FORMATS_RESULT, train, infer, rng, n_sequences=8, max_len=60,
                                    scale="tiny", per_token_kl=kl)
        summary = json.loads((out / SUMMARY).read_text())
        summary.update(is_reference_pair=train == infer, seq_kl_k3=kl * 36, exact_seq_kl=kl * 37, mean_length=36.5,
                       token_k3_kl=kl, token_k3_kl_median=kl / 1e6, token_k3_kl_p99=kl * 10, run_id="20261205T000000Z")
        (out / SUMMARY).write_text(json.dumps(summary))


def test_the_table_lists_every_measured_rung_finest_first_and_fig5_leaves_the_result_out(tmp_path):
    runs, published = tmp_path / "runs", tmp_path / "logs"
    _formats_result(runs, {("fp16", "fp4_e2m1"): 1e-2, ("fp16", "fp16"): 1e-6, ("fp16", "fp8_e4m3"): 5e-4,
                           ("bf16", "fp8_e4m3"): 5e-4})
    write_mismatch_result(runs, FORMATS_RESULT, "fp32", "fp8_e5m2", np.random.default_rng(1), n_sequences=2)  # asked
    copies = publish_mismatch(runs, published)  # for by no one: a reference pair, not published
    assert sorted(c.name for c in copies) == ["bf16-fp8_e4m3", "fp16-fp16", "fp16-fp4_e2m1", "fp16-fp8_e4m3"]
    table = formats_table([tmp_path / "elsewhere", published])
    assert list(zip(table["train"], table["infer"], strict=True)) == [
        ("fp16", "fp16"), ("fp16", "fp8_e4m3"), ("bf16", "fp8_e4m3"), ("fp16", "fp4_e2m1")]
    assert table["seq_kl_k3"].tolist()[-1] == 1e-2 * 36
    markdown = formats_markdown(table)
    assert "| FP16 / MXFP4 " in markdown and "| 0.36 " in markdown and "tiny scale (CPU)" in markdown
    assert load_offline([runs, published], "tiny") == {}  # no self pair of another model: Fig. 5 draws nothing


def test_without_the_result_the_table_is_empty_and_says_how_to_make_it(tmp_path):
    table = formats_table(tmp_path)
    assert table.empty and table.attrs["sources"] == []
    assert "`make mismatch-formats`" in formats_markdown(table)


def test_a_summary_missing_or_garbling_a_value_draws_a_dash_not_a_traceback(tmp_path):
    _formats_result(tmp_path, {("fp16", "fp16"): 1e-6})
    summary_path = tmp_path / FORMATS_RESULT / "fp16-fp16" / SUMMARY
    summary = json.loads(summary_path.read_text())
    del summary["n_sequences"]
    summary["mean_length"], summary["seq_kl_k3"] = "n/a", None
    summary_path.write_text(json.dumps(summary))
    row = next(line for line in formats_markdown(formats_table(tmp_path)).splitlines() if line.startswith("| FP16 / FP16"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:3] == ["—", "—"] and cells[4] == "—" and row.count("—") == 4  # [4]: no exact KL per token here


def test_the_exact_kl_carries_a_seeded_bootstrap_interval_that_a_heavy_tail_widens(tmp_path):
    import pandas as pd

    from precision_rl.analysis.mismatch_formats import sequence_kl_interval
    from precision_rl.mismatch.layout import TOKENS

    _formats_result(tmp_path, {("fp16", "fp16"): 1e-6, ("fp16", "bf16"): 1e-5})
    folder = tmp_path / FORMATS_RESULT
    assert sequence_kl_interval(folder / "fp16-fp16") == (None, None), "no exact KL logged: no interval"
    for pair, heavy in (("fp16-fp16", False), ("fp16-bf16", True)):
        tokens = pd.read_parquet(folder / pair / TOKENS)
        tokens["exact_kl"] = 1e-4
        if heavy:
            tokens.loc[0, "exact_kl"] = 1.0  # one token of one answer carries nearly all of it
        tokens.to_parquet(folder / pair / TOKENS, index=False)
    per_answer = pd.read_parquet(folder / "fp16-fp16" / TOKENS).groupby("seq_id")["exact_kl"].sum()
    even = sequence_kl_interval(folder / "fp16-fp16")
    assert even[0] <= per_answer.mean() <= even[1] and even == sequence_kl_interval(folder / "fp16-fp16")
    low, high = sequence_kl_interval(folder / "fp16-bf16")
    assert high / low > 5 * even[1] / even[0], "an answer that carries the mean makes the interval wide"
    table = formats_table(tmp_path)
    rows = {line.split("|")[1].strip(): line for line in formats_markdown(table).splitlines() if line.startswith("| FP16")}
    assert f"| {low:.2g}–{high:.2g} " in rows["FP16 / BF16"]
