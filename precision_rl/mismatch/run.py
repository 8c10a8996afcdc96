"""CLI glue: sample each rollout (format and engine dtype) once, recompute each asked training dtype on it, write
every pair."""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

from precision_rl.config.precision import PRECISIONS, PrecisionArm
from precision_rl.errors import UserError
from precision_rl.launch import runs
from precision_rl.mismatch import metrics, outputs
from precision_rl.mismatch.config import (
    GPU_MAX_TOKENS,
    REFERENCE,
    TINY_DATA,
    MismatchConfig,
    default_model,
    gpu_max_prompt_tokens,
    model_slug,
    pair_dirname,
    parse_dtypes,
    parse_pairs,
    rollout_of,
)
from precision_rl.mismatch.prompts import prompt_token_ids
from precision_rl.mismatch.recompute import Recompute, recompute
from precision_rl.mismatch.sampling import Sample, SamplingResult, sample
from precision_rl.tiny.pretrain import build_record

EXACT_KL_AUTO_LIMIT = 64_000_000  # full-vocab mu entries (x4 bytes) kept in memory per inference dtype


def exact_vocab(cfg: MismatchConfig, vocab: int, n_prompts: int) -> int | None:
    """Return the vocabulary size when full-vocab mu (exact KL) is wanted and cheap enough, else None."""
    if cfg.exact_kl == "off":
        return None
    if cfg.exact_kl == "on" or n_prompts * cfg.n * cfg.max_tokens * vocab <= EXACT_KL_AUTO_LIMIT:
        return vocab
    return None


def retokenize_mismatches(tokenizer, samples: list[Sample]) -> int:
    """Return how many responses re-encode to other ids after decoding (a text round trip would corrupt them;
    the recompute teacher-forces the sampled ids, so they are scored correctly)."""
    count = 0
    for s in samples:
        text = tokenizer.decode(s.response_ids, skip_special_tokens=False)
        count += tokenizer.encode(text, add_special_tokens=False) != s.response_ids
    return count


def pair_result(samples: list[Sample], rec: Recompute, ref: Recompute | None) -> tuple:
    """Return (tokens, sequences, summary numbers) of one pair; ``ref`` adds each engine's error vs fp32."""
    tokens = outputs.token_table(samples, rec)
    kept = [s for s in samples if s.seq_id not in rec.dropped]
    sequences = metrics.sequence_table(tokens, {s.seq_id: s.prompt_id for s in kept},
                                       {s.seq_id: len(s.response_ids) for s in kept})
    summary = metrics.summarize(tokens, sequences)
    summary["n_dropped"] = len(rec.dropped)
    summary["dropped"] = {str(k): v for k, v in sorted(rec.dropped.items())}
    summary["n_empty_responses"] = sum(1 for s in kept if not s.response_ids)
    if ref is not None and ref is not rec:
        both = [k for k, s in enumerate(samples) if s.seq_id not in rec.dropped and s.seq_id not in ref.dropped]
        mu = np.concatenate([samples[k].logp_infer for k in both] or [np.zeros(0)])
        pi = np.concatenate([rec.logp_train[k] for k in both] or [np.zeros(0)])
        pi_ref = np.concatenate([ref.logp_train[k] for k in both] or [np.zeros(0)])
        summary["reference"] = {"dtype": ref.train, "engine": ref.engine,
                                "infer_vs_ref": metrics.token_metrics(pi_ref, mu),
                                "train_vs_ref": metrics.token_metrics(pi_ref, pi)}
    return tokens, sequences, summary


def _manifest(cfg: MismatchConfig, model: str, arm: PrecisionArm, argv: list[str] | None) -> dict:
    return {"kind": "mismatch", "model": model, "train_dtype": arm.train, "infer_dtype": arm.infer,
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(cfg).items() if k != "pairs"},
            "pairs": [pair_dirname(a) for a in cfg.pairs], "command": argv if argv is not None else sys.argv,
            "model_build": build_record(model) if Path(model).is_dir() else None,
            "git": runs.git_state(), "packages": runs.package_versions(), "hardware": runs.hardware(),
            "time_utc": runs.utc_stamp()}


def looks_like_path(model: str) -> bool:
    """Return whether ``model`` names a local folder rather than a hub repo id (``owner/name``)."""
    return model.startswith(("/", ".", "~")) or model.count("/") > 1 or Path(model).exists()


def run_mismatch(cfg: MismatchConfig, argv: list[str] | None = None) -> dict[str, Path]:
    """Run the whole measurement for ``cfg``; return {pair name: result directory} of every pair written."""
    from transformers import AutoConfig, AutoTokenizer

    model = cfg.model
    slug = cfg.name or model_slug(model)
    root = outputs.model_root(slug)
    planned = list(cfg.pairs)
    for infer, _ in cfg.rollouts:
        if cfg.reference and infer != REFERENCE and infer in PRECISIONS:  # a quantized rollout's fp32 pair would
            planned.append(PrecisionArm(REFERENCE, infer))                # be another rollout (in fp32)
    planned = list(dict.fromkeys(planned))
    outputs.check_free([root / pair_dirname(a) for a in planned], cfg.overwrite)
    if looks_like_path(model) and not Path(model).is_dir():
        raise UserError(f"MODEL {model!r} is no model folder (a local path must be a folder with config.json; "
                        "a hub model is named owner/name)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
        model_config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load model {model!r}: {str(exc).splitlines()[0]}") from None
    vocab = model_config.vocab_size
    prompts = prompt_token_ids(tokenizer, cfg.data, cfg.num_prompts, cfg.seed)
    context = getattr(model_config, "max_position_embeddings", None)
    longest = max(len(p) for p in prompts) + cfg.max_tokens
    if context is not None and longest > context:
        raise UserError(f"the longest prompt ({longest - cfg.max_tokens} tokens) plus MAX_TOKENS={cfg.max_tokens} "
                        f"exceeds the model's {context} positions: lower MAX_TOKENS")
    full_vocab = exact_vocab(cfg, vocab, len(prompts))
    written: dict[str, Path] = {}
    summaries: dict[str, dict] = {}
    run_id = runs.utc_stamp()  # shared by every pair of this invocation (ratios pair only these)
    for rollout in cfg.rollouts:
        infer, engine_dtype = rollout
        where = infer if infer == engine_dtype else f"{infer} (linear layers; the engine in {engine_dtype})"
        print(f"== sampling {len(prompts)} prompts x {cfg.n} in {where} with vLLM ==", file=sys.stderr)
        res: SamplingResult = sample(model, infer, prompts, cfg.n, cfg.max_tokens, cfg.temperature, cfg.seed,
                                     cfg.max_model_len, full_vocab, cfg.ignore_eos, cfg.device, engine_dtype)
        retok = retokenize_mismatches(tokenizer, res.samples)
        recs: dict[str, Recompute] = {}
        for train in cfg.train_dtypes_for(rollout):
            print(f"== recomputing {res.n_tokens} tokens in {train} ({cfg.train_mode}) ==", file=sys.stderr)
            recs[train] = recompute(model, train, res.samples, cfg.train_mode, cfg.device, cfg.temperature,
                                    cfg.batch_tokens, cfg.logit_elems)
            gc.collect()
        for arm in planned:
            if rollout_of(arm) != rollout:
                continue
            rec = recs[arm.train]
            tokens, sequences, numbers = pair_result(res.samples, rec, recs.get(REFERENCE) if cfg.reference else None)
            summary = {"model": model, "train_dtype": arm.train, "infer_dtype": arm.infer, "scale": cfg.scale,
                       "run_id": run_id, **numbers,
                       "n_retokenize_mismatch": retok,
                       "is_reference_pair": arm not in cfg.pairs,
                       "engines": {"infer": res.engine, "train": rec.engine},
                       "sampling": {"n": cfg.n, "num_prompts": len(prompts), "max_tokens": cfg.max_tokens,
                                    "temperature": cfg.temperature, "top_p": cfg.top_p, "seed": cfg.seed,
                                    "data": cfg.data, "ignore_eos": cfg.ignore_eos},
                       "timing": {"generation_s": res.seconds, "recompute_s": rec.seconds,
                                  "recompute_load_s": rec.load_seconds,
                                  "generation_tok_per_s": res.n_tokens / res.seconds if res.seconds else None,
                                  "recompute_tok_per_s": (res.n_tokens / (rec.seconds - rec.load_seconds)
                                                          if rec.seconds > rec.load_seconds else None)}}
            name = pair_dirname(arm)
            written[name] = outputs.write_pair(root / name, tokens, sequences, summary,
                                               _manifest(cfg, model, arm, argv), cfg.overwrite)
            summaries[name] = summary
            print(f"{name}: mean|pi-mu|={summary['mean_abs_prob_diff']} k3={summary['token_k3_kl']} "
                  f"exact_kl={summary['exact_kl']} -> {written[name]}", file=sys.stderr)
        del res, recs
        gc.collect()
    if "bf16-bf16" in summaries and "fp16-fp16" in summaries:
        ratio = metrics.ratios(summaries["bf16-bf16"], summaries["fp16-fp16"])
        for name in ("bf16-bf16", "fp16-fp16"):
            outputs.update_summary(written[name], ratios_bf16_over_fp16={**ratio, "run_id": run_id})
    return written


def config_from_args(args: argparse.Namespace) -> MismatchConfig:
    """Return the MismatchConfig for parsed command-line ``args`` (defaults depend on CPU vs GPU)."""
    from precision_rl.config.scale import cuda_gpu_count

    device = args.device or ("cuda" if cuda_gpu_count() else "cpu")
    on_cpu = device == "cpu"
    dtypes = parse_dtypes(args.dtypes)
    return MismatchConfig(
        model=args.model or default_model(device), data=args.data or (TINY_DATA if on_cpu else "sanity"),
        dtypes=dtypes, pairs=parse_pairs(args.pairs, dtypes), n=args.n or (8 if on_cpu else 32),
        max_tokens=args.max_tokens or (128 if on_cpu else GPU_MAX_TOKENS),
        num_prompts=args.num_prompts or (8 if on_cpu else 64),
        temperature=args.temperature, top_p=args.top_p, seed=args.seed, train_mode=args.train_mode,
        reference=not args.no_reference, exact_kl=args.exact_kl, ignore_eos=args.ignore_eos,
        max_model_len=args.max_model_len or (512 if on_cpu else GPU_MAX_TOKENS + gpu_max_prompt_tokens()),
        batch_tokens=args.batch_tokens or (8192 if on_cpu else 65536), overwrite=args.overwrite, name=args.name,
        device=device)


def add_parser(sub) -> None:
    """Register the ``mismatch`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("mismatch", help="offline training-inference mismatch: vLLM samples vs HF recompute (Fig. 5)")
    p.add_argument("--model", help="HF id or local path (default: the tiny model on CPU, R1-Distill-1.5B on GPU)")
    p.add_argument("--data", help=f"'{TINY_DATA}' (generated prompts; '{TINY_DATA}:2-24' for chains of 2 to 24 "
                   "operations), a recipe name or a verl-schema parquet")
    p.add_argument("--dtypes", default="bf16 fp16", help="inference=training dtypes to measure, e.g. 'bf16 fp16'")
    p.add_argument("--pairs", default="self", help="self | all | train-infer list, e.g. 'bf16-fp16,fp16-bf16'; "
                   "the infer side may be a quantized rollout on a CPU: 'fp16-fp8_e4m3,fp16-fp4_e2m1'")
    p.add_argument("--n", type=int, help="samples per prompt (default 8 on CPU, 32 on GPU)")
    p.add_argument("--max-tokens", type=int, help=f"response budget (default 128 on CPU, {GPU_MAX_TOKENS} on GPU, "
                   "as Fig. 5's ~26K-token sequences need)")
    p.add_argument("--num-prompts", type=int, help="prompts to use (default 8 on CPU, 64 on GPU)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-mode", default="fsdp", help="fsdp (fp32 weights cast + autocast, default) | pure")
    p.add_argument("--no-reference", action="store_true", help="skip the fp32 recompute of every sample set")
    p.add_argument("--exact-kl", default="auto", help="full-vocab KL(mu||pi): auto (when small) | on | off")
    p.add_argument("--ignore-eos", action="store_true", help="always generate max-tokens tokens")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--batch-tokens", type=int, help="padded tokens per recompute batch")
    p.add_argument("--device", help="cpu | cuda (default: cuda when a GPU is visible)")
    p.add_argument("--name", help="result directory name for the model (default: derived from --model)")
    p.add_argument("--overwrite", action="store_true", help="replace existing pair directories")
    p.set_defaults(func=cmd_mismatch)


def cmd_mismatch(args: argparse.Namespace) -> int:
    """Run the mismatch tool for the CLI; print the pair directories (stderr), then one stdout line
    ``<scale>\t<model result directory>``; return 0."""
    start = time.perf_counter()
    cfg = config_from_args(args)
    written = run_mismatch(cfg, argv=sys.argv)
    for name, path in written.items():
        print(f"{name}\t{path}", file=sys.stderr)
    print(f"done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print(f"{cfg.scale}\t{next(iter(written.values())).parent}")  # stdout, for make: scale, model dir
    return 0
