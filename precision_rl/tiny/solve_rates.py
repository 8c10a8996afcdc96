"""Can a sanity set be drawn from a tiny model? Its success rate on generated problems, by chain length.

The sanity rule keeps problems the model solves 20-80 % of the time, and the tiny sanity set needs
``TinyDataConfig.max_train`` of them. This probe
samples k responses per problem (vLLM, T=1, the filter of ``precision_rl.tiny.data``) from the tiny model or the
long-answer model (optionally on another chain range or SFT length), and reports per chain length the mean success
rate and how many problems lie in the band. ``python -m precision_rl.tiny.solve_rates [--model long] [--max-ops N]
[--sft-steps N]`` (``make solve-rates``); the table is also written as CSV under ``runs/solve_rates/`` (an existing
one is printed, not redone).
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from precision_rl.errors import UserError
from precision_rl.paths import runs_root
from precision_rl.tiny.data import TinyDataConfig
from precision_rl.tiny.pretrain import LONG_ANSWER_RECIPE, LONG_ANSWER_TOKENS, PretrainConfig

RESULTS_DIR = "solve_rates"
MODELS = {"tiny": PretrainConfig(), "long": LONG_ANSWER_RECIPE}
COLUMNS = ("ops", "problems", "mean_success", "median_success", "in_band")


def by_chain_length(ops: list[int], rates: list[float], low: float, high: float) -> list[dict]:
    """Return one row per chain length: the problems of that length, their mean and median success rate and how
    many lie in ``[low, high]``; a last row ``all`` sums them up."""
    if len(ops) != len(rates):
        raise ValueError(f"{len(ops)} chain lengths for {len(rates)} success rates")

    def row(label, picked):
        return {"ops": label, "problems": len(picked), "mean_success": round(statistics.fmean(picked), 4),
                "median_success": round(statistics.median(picked), 4),
                "in_band": sum(low <= r <= high for r in picked)}

    rows = [row(n, [r for o, r in zip(ops, rates, strict=True) if o == n]) for n in sorted(set(ops))]
    return rows + [row("all", list(rates))] if rates else rows


def plan(model: str, max_ops: int | None, sft_steps: int | None, pool: int, k: int) -> tuple[PretrainConfig,
                                                                                              TinyDataConfig]:
    """Return the SFT recipe of the probed model and the filter settings of the probe; raise UserError for a model
    or chain range the tiny model cannot hold."""
    if model not in MODELS:
        raise UserError(f"unknown model {model!r}: choose {' or '.join(MODELS)}")
    recipe = MODELS[model]
    recipe = replace(recipe, max_ops=max_ops or recipe.max_ops, steps=sft_steps or recipe.steps)
    if not 2 <= recipe.max_ops <= LONG_ANSWER_RECIPE.max_ops:
        raise UserError(f"--max-ops must lie in 2..{LONG_ANSWER_RECIPE.max_ops} (longer chains exceed the model's "
                        f"{recipe.model.max_position_embeddings} positions)")
    if pool < 1 or k < 1:
        raise UserError("--pool and --k must be positive")
    base = TinyDataConfig()
    long_chains = recipe.max_ops > base.max_ops
    prompt_tokens, max_tokens = LONG_ANSWER_TOKENS if long_chains else (base.max_prompt_tokens, base.max_tokens)
    return recipe, replace(base, pool=pool, k=k, min_ops=recipe.min_ops, max_ops=recipe.max_ops,
                           max_tokens=max_tokens, max_prompt_tokens=prompt_tokens)


def result_path(recipe: PretrainConfig, config: TinyDataConfig) -> Path:
    """Return where the probe of ``recipe``'s model with ``config`` writes its table."""
    name = f"{recipe.key()}-ops{config.min_ops}-{config.max_ops}-n{config.pool}-k{config.k}.csv"
    return runs_root() / RESULTS_DIR / name


def render(rows: list[dict], config: TinyDataConfig, recipe: PretrainConfig) -> str:
    """Return the table as text, with the verdict: enough problems in the band for a tiny sanity set or not."""
    from precision_rl.console import render_table

    total = next((r for r in rows if r["ops"] == "all"), None)
    in_band = int(total["in_band"]) if total else 0
    verdict = ("enough" if in_band >= config.max_train else "too few") + f" for a tiny sanity set ({config.max_train})"
    head = (f"model {recipe.key()} (SFT {recipe.steps} steps on chains of {recipe.min_ops}-{recipe.max_ops} "
            f"operations), {config.k} samples per problem, band {config.low:.0%}-{config.high:.0%}")
    table = render_table([[r[c] for c in COLUMNS] for r in rows], list(COLUMNS))
    return f"{head}\n{table}\n{in_band} of {total['problems'] if total else 0} problems in the band: {verdict}"


def run(model: str = "long", max_ops: int | None = None, sft_steps: int | None = None, pool: int = 256,
        k: int = 16) -> int:
    """Probe the model (building it when missing), print and write the table; return the exit status."""
    from precision_rl.data.sources import Problem
    from precision_rl.fileio import atomic_write_text
    from precision_rl.tiny.data import filter_pool
    from precision_rl.tiny.pretrain import ensure_tiny_model
    from precision_rl.tiny.problems import make_problems

    recipe, config = plan(model, max_ops, sft_steps, pool, k)
    out = result_path(recipe, config)
    if out.is_file():
        with out.open() as fh:
            rows = list(csv.DictReader(fh))
        print(f"{out} exists, kept:\n{render(rows, config, recipe)}", flush=True)
        return 0
    model_dir = ensure_tiny_model(recipe)
    generated = make_problems(config.pool, seed=config.seed, min_ops=config.min_ops, max_ops=config.max_ops)
    result = filter_pool(model_dir, [Problem(p.question, p.answer) for p in generated], config)
    rows = by_chain_length([len(p.steps) for p in generated], list(result.rates), config.low, config.high)
    text = io.StringIO()
    writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text.getvalue())
    print(f"{render(rows, config, recipe)}\nwritten to {out}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the probe; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="long", help=f"which recipe: {' or '.join(MODELS)} (default long)")
    p.add_argument("--max-ops", type=int, help="train and probe on chains of 2..N operations (default: the recipe's)")
    p.add_argument("--sft-steps", type=int, help="SFT steps of the probed model (default: the recipe's)")
    p.add_argument("--pool", type=int, default=256, help="generated problems (default 256)")
    p.add_argument("--k", type=int, default=16, help="samples per problem (default 16, as the sanity filter)")
    args = p.parse_args(argv)
    try:
        return run(args.model, args.max_ops, args.sft_steps, args.pool, args.k)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
