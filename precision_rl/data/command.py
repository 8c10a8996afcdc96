"""``python -m precision_rl data [NAMES...]``: build dataset recipes (all reachable ones when none are named)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from precision_rl.config.precision import VLLM_DTYPES
from precision_rl.config.scale import PAPER
from precision_rl.data.recipes import RECIPES, BuildResult, build, get_recipe, write_dataset
from precision_rl.data.sources import load_hub, load_local
from precision_rl.errors import UserError

REBUILD = "sanity-rebuild"


def registry_templates() -> dict[str, set[str]]:
    """Return, per dataset recipe the registry names at paper scale, the prompt templates experiments use with it."""
    from precision_rl.config import registry

    out: dict[str, set[str]] = {}
    for spec in registry.load_all(PAPER).values():
        for name in (spec.data.train, *spec.data.val):
            out.setdefault(name, set()).add(spec.template)
    return out


def add_parser(sub) -> None:
    """Register the ``data`` subcommand on the CLI's subparsers ``sub``."""
    p = sub.add_parser("data", help="build dataset recipes as verl parquet under data/ (all reachable by default)")
    p.add_argument("names", nargs="*", help=f"recipes to build (default: all but {REBUILD}): {', '.join(RECIPES)}")
    p.add_argument("--source", type=Path, help="local copy to read instead of the shared folder or the HF hub")
    p.add_argument("--overwrite", action="store_true", help="rebuild outputs that already exist")
    p.add_argument("--root", type=Path, help="data root (default: $PRECISION_RL_DATA or <repo>/data)")
    g = p.add_argument_group(f"{REBUILD} (samples a model with vLLM)")
    g.add_argument("--model", default="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", help="HF id or local path")
    g.add_argument("--k", type=int, default=40, help="samples per problem")
    g.add_argument("--low", type=float, default=0.2, help="lowest success rate kept")
    g.add_argument("--high", type=float, default=0.8, help="highest success rate kept")
    g.add_argument("--max-tokens", type=int, default=8192)
    g.add_argument("--dtype", default=VLLM_DTYPES["bf16"], choices=tuple(VLLM_DTYPES.values()))
    g.add_argument("--template", default="r1_distill_qwen")
    g.add_argument("--limit", type=int, help="use only the first N source problems")
    g.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def _without_math500(problems: list) -> list:
    """Return ``problems`` minus any MATH500 question (the paper's sanity set has none), when MATH500 is at hand."""
    from precision_rl.paths import shared_data_dir

    suite = shared_data_dir() / "evaluation_suite"
    if not suite.exists():
        return problems
    held_out = {" ".join(p.question.split()) for p in load_local(suite, "math").problems}
    return [p for p in problems if " ".join(p.question.split()) not in held_out]


def _rebuild(args, root: Path) -> list[BuildResult]:
    from precision_rl.data.rebuild import rebuild_sanity
    from precision_rl.data.store import dataset_dir

    recipe = get_recipe(REBUILD)
    target = dataset_dir(root, recipe.name) / f"{recipe.split}.parquet"
    if target.exists() and not args.overwrite:
        return [BuildResult(recipe.name, args.template, "exists", f"{target} (OVERWRITE=1 to rebuild)")]
    loaded = load_local(args.source) if args.source else load_hub(recipe.hub)
    problems = _without_math500(loaded.problems)
    problems = problems[: args.limit] if args.limit else problems
    result = rebuild_sanity(args.model, problems, k=args.k, low=args.low, high=args.high, template=args.template,
                            dtype=args.dtype, max_tokens=args.max_tokens, seed=args.seed)
    if not result.kept:
        raise UserError(f"{REBUILD}: no problem had a success rate in [{args.low}, {args.high}] "
                        f"(of {len(problems)}); nothing written")
    provenance = {**loaded.provenance, "model": args.model, "k": args.k, "band": [args.low, args.high],
                  "max_tokens": args.max_tokens, "dtype": args.dtype, "seed": args.seed, "candidates": len(problems)}
    return [write_dataset(recipe, result.kept, provenance, root, args.template)]


def run(args: argparse.Namespace) -> int:
    """Build the named recipes (or all reachable ones); print one line per output; return the exit code."""
    from precision_rl.paths import data_root

    root = (args.root or data_root()).resolve()
    names = list(dict.fromkeys(args.names)) or [n for n, r in RECIPES.items() if not r.explicit_only]
    for name in names:
        get_recipe(name)
    templates = registry_templates()
    explicit = bool(args.names)
    results: list[BuildResult] = []
    for name in names:
        try:
            if name == REBUILD:
                results += _rebuild(args, root)
            else:
                results += build(name, root, args.source, args.overwrite, tuple(sorted(templates.get(name, ()))))
        except UserError as exc:
            if explicit:
                raise
            results.append(BuildResult(name, get_recipe(name).template, "unavailable", str(exc)))
    for r in results:
        print(f"{r.status:<12} {r.name:<14} {r.template:<16} {r.detail}")
    missing = [r.name for r in results if r.status == "unavailable"]
    if missing:
        print(f"{len(missing)} dataset(s) unavailable: {', '.join(missing)}; pass a local copy with "
              "make data DATA=<name> SOURCE=/path", file=sys.stderr)
    return 0
