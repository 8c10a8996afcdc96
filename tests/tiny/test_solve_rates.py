"""The solve-rate probe: rows per chain length, the probed recipe and filter, and a result that is never redone."""

from __future__ import annotations

import pytest

from precision_rl import paths
from precision_rl.errors import UserError
from precision_rl.tiny import solve_rates as S
from precision_rl.tiny.data import TinyDataConfig
from precision_rl.tiny.pretrain import LONG_ANSWER_RECIPE, LONG_ANSWER_TOKENS, PretrainConfig


def test_rows_per_chain_length_count_the_problems_in_the_band():
    rows = S.by_chain_length([2, 3, 2, 3, 3], [0.0, 0.5, 0.25, 0.9, 0.2], 0.2, 0.8)
    assert [r["ops"] for r in rows] == [2, 3, "all"]
    assert rows[0] == {"ops": 2, "problems": 2, "mean_success": 0.125, "median_success": 0.125, "in_band": 1}
    assert rows[1]["in_band"] == 2 and rows[1]["median_success"] == 0.5
    assert rows[2]["problems"] == 5 and rows[2]["in_band"] == 3
    with pytest.raises(ValueError, match="2 chain lengths for 1 success rates"):
        S.by_chain_length([2, 3], [0.1], 0.2, 0.8)


def test_the_long_model_is_probed_with_the_long_budget_and_the_tiny_one_with_the_filters():
    recipe, config = S.plan("long", None, None, 256, 16)
    assert recipe == LONG_ANSWER_RECIPE and (config.min_ops, config.max_ops) == (2, 24)
    assert (config.max_prompt_tokens, config.max_tokens) == LONG_ANSWER_TOKENS
    assert (config.low, config.high, config.seed, config.max_train) == (TinyDataConfig().low, TinyDataConfig().high,
                                                                        TinyDataConfig().seed, TinyDataConfig().max_train)
    shorter, config12 = S.plan("long", 12, 1600, 128, 8)
    assert (shorter.max_ops, shorter.steps, shorter.batch_size) == (12, 1600, LONG_ANSWER_RECIPE.batch_size)
    assert (config12.pool, config12.k, config12.max_ops) == (128, 8, 12)
    tiny, tiny_config = S.plan("tiny", None, None, 256, 16)
    assert tiny == PretrainConfig() and tiny_config == TinyDataConfig(pool=256)


@pytest.mark.parametrize("args,message", [(("huge", None, None, 256, 16), "unknown model 'huge'"),
                                          (("long", 40, None, 256, 16), "--max-ops must lie in 2..24"),
                                          (("long", None, None, 0, 16), "--pool and --k must be positive")])
def test_bad_arguments_are_one_line_errors(args, message):
    with pytest.raises(UserError, match=message):
        S.plan(*args)


def test_an_existing_result_is_printed_and_never_redone(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path))
    recipe, config = S.plan("long", 12, 1600, 256, 16)
    out = S.result_path(recipe, config)
    assert out == tmp_path / "solve_rates" / f"{recipe.key()}-ops2-12-n256-k16.csv"
    out.parent.mkdir(parents=True)
    out.write_text("ops,problems,mean_success,median_success,in_band\n2,10,0.05,0.0,1\nall,10,0.05,0.0,1\n")
    assert S.main(["--max-ops", "12", "--sft-steps", "1600"]) == 0
    printed = capsys.readouterr().out
    needed = TinyDataConfig().max_train
    assert "exists, kept" in printed and f"1 of 10 problems in the band: too few for a tiny sanity set ({needed})" in printed
    assert out.read_text().startswith("ops,problems")


def test_a_bad_argument_exits_2_naming_it(capsys):
    assert S.main(["--model", "huge"]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown model 'huge': choose tiny or long"


@pytest.mark.slow
def test_the_probe_runs_the_filters_engine_and_writes_its_table(tiny_random_model, tmp_path, monkeypatch, capsys):
    """A random model solves nothing: every chain length has success 0 and no problem lies in the band."""
    pytest.importorskip("vllm")
    from precision_rl.tiny import pretrain

    monkeypatch.setenv(paths.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    monkeypatch.setattr(pretrain, "ensure_tiny_model", lambda recipe: tiny_random_model)
    assert S.run("tiny", pool=4, k=2) == 0
    out = S.result_path(*S.plan("tiny", None, None, 4, 2))
    lines = out.read_text().splitlines()
    assert lines[0] == ",".join(S.COLUMNS) and lines[-1].startswith("all,4,0.0,0.0,0")
    assert f"0 of 4 problems in the band: too few for a tiny sanity set ({TinyDataConfig().max_train})" in capsys.readouterr().out
