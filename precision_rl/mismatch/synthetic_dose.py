"""The dose of the synthetic mismatch, measured offline: for each noise strength σ, sample from the perturbed policy μ
(the model's logits plus the seeded noise of ``precision_rl.logit_noise``) and report the per-sequence KL[μ‖π]
against the clean policy π, in the paper's definition (the mean over sequences of Σ_t (log μ − log π), samples from
μ) and by k3, with the perturbed sampler's own accuracy.

The model runs in fp32 through HF transformers with a KV cache, on the prompts of a verl parquet (the tiny sanity set
by default), at the instrument's sampling settings (T, response length, samples per prompt). The runs' own logged
``mismatch/sequence_kl_mean`` is the same quantity on the training batches; this tool says where a strength lands
before spending a run on it, and ``make synthetic-dose`` writes the committed calibration the ladder's synthetic rungs
read.

``make synthetic-dose [ARGS='--sigmas 0.5,1,2,3 --prompts 64 --n 16 --temperature 1 --max-tokens 64 --data tiny_sanity
--seed 42 --out FILE']`` prints a table and writes a JSON file with the settings, the command and this machine's
CPU; it never overwrites one.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from precision_rl.console import render_table
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_json
from precision_rl.logit_noise import extend_hash, noise, prefix_hash
from precision_rl.paths import REPO_ROOT, SYNTHETIC_DOSE_FILE, mismatch_root

DEFAULT_SIGMAS = (0.5, 1.0, 2.0, 3.0)
DEFAULT_DATA = "tiny_sanity"
COMMAND = "python -m precision_rl.mismatch.synthetic_dose"


@dataclass(frozen=True)
class DosePoint:
    """One strength's measured dose and the perturbed sampler's accuracy."""

    sigma: float
    sequences: int
    mean_tokens: float
    sequence_kl: float  # mean over sequences of Σ_t (log μ − log π): the paper's KL[μ‖π] per sequence
    sequence_kl_sem: float  # its standard error over sequences
    sequence_kl_k3: float  # mean over sequences of Σ_t (π/μ − 1 − log π/μ)
    accuracy: float  # share of responses the grader scores correct


@dataclass(frozen=True)
class DoseSettings:
    """Where and how the dose is measured."""

    model: str
    data: str
    prompts: int
    n: int
    temperature: float
    max_tokens: int
    seed: int


def shown_model(model: str) -> str:
    """Return ``model`` as a record names it: relative to the repository when the folder lies inside it, so that a
    committed calibration names no one's home directory."""
    path = Path(model).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else model


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(prompts), width), dtype=torch.int64)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids, mask


@dataclass(frozen=True)
class TokenStep:
    """One decoding step of the responses still being written: which rows, and per row the sampled token's log π and
    log μ and the norm of the gradient of log π(token) with respect to the logits, ‖e_token − π‖ / T."""

    rows: np.ndarray
    log_pi: np.ndarray
    log_mu: np.ndarray
    logit_grad_norm: np.ndarray


@torch.no_grad()
def sample_with_noise(model, prompts: list[list[int]], sigma: float, noise_seed: int, temperature: float,
                      max_tokens: int, eos_id: int, generator: torch.Generator, trace: list[TokenStep] | None = None
                      ) -> tuple[list[list[int]], np.ndarray, np.ndarray, np.ndarray]:
    """Return the responses sampled from μ = softmax((z + σ·noise) / T) for ``prompts`` (one row each), and per
    response Σ_t (log μ − log π), Σ_t k3 and its token count (π = softmax(z / T), the clean policy). With ``trace``,
    one TokenStep per decoding step is appended to it."""
    ids, mask = _left_pad(prompts, eos_id)
    rows = len(prompts)
    hashes = torch.tensor([prefix_hash(p) for p in prompts], dtype=torch.int64)
    alive = torch.ones(rows, dtype=torch.bool)
    responses: list[list[int]] = [[] for _ in range(rows)]
    k1, k3, lengths = np.zeros(rows), np.zeros(rows), np.zeros(rows)
    position = (mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=position, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1].float()
    next_position = position[:, -1:] + 1
    for _ in range(max_tokens):
        log_pi = torch.log_softmax(logits / temperature, dim=-1)
        perturbed = logits + sigma * noise(hashes, logits.shape[-1], noise_seed) if sigma else logits
        log_mu = torch.log_softmax(perturbed / temperature, dim=-1)
        token = torch.multinomial(log_mu.exp(), 1, generator=generator).squeeze(1)
        ratio = (log_pi.gather(1, token[:, None]) - log_mu.gather(1, token[:, None])).squeeze(1).double().numpy()
        live = alive.numpy()
        if trace is not None:
            pi = log_pi.double().exp()
            pi_token = pi.gather(1, token[:, None]).squeeze(1)
            grad_norm = (1 - 2 * pi_token + pi.square().sum(1)).clamp(min=0).sqrt() / temperature
            rows = np.flatnonzero(live)
            trace.append(TokenStep(rows, log_pi.gather(1, token[:, None]).squeeze(1).double().numpy()[rows],
                                   log_mu.gather(1, token[:, None]).squeeze(1).double().numpy()[rows],
                                   grad_norm.numpy()[rows]))
        k1[live] -= ratio[live]
        k3[live] += np.expm1(ratio[live]) - ratio[live]
        lengths[live] += 1
        for row in np.flatnonzero(live):
            responses[row].append(int(token[row]))
        alive &= token != eos_id
        if not alive.any():
            break
        hashes = extend_hash(hashes, token)
        mask = torch.cat([mask, alive[:, None].to(mask.dtype)], dim=1)
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_position, past_key_values=cache,
                    use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1].float()
        next_position = next_position + 1
    return responses, k1, k3, lengths


@dataclass
class Problems:
    """The model in fp32 and the problems it answers: one prompt per sample (``n`` per problem, consecutive)."""

    model: object
    tokenizer: object
    prompts: list[list[int]]
    truths: list[str]
    template: str


def load_problems(settings: DoseSettings) -> Problems:
    """Return the model of ``settings`` and its first ``settings.prompts`` problems, each repeated ``settings.n``
    times; a UserError when the model folder cannot be loaded."""
    import pandas as pd
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from precision_rl.mismatch.prompts import data_path

    if settings.data == DEFAULT_DATA:
        from precision_rl.tiny.data import ensure_datasets
        from precision_rl.tiny.shipped import SHIPPED_DIR

        ensure_datasets(SHIPPED_DIR)
    frame = pd.read_parquet(data_path(settings.data)).head(settings.prompts)
    if not (Path(settings.model) / "config.json").is_file():
        raise UserError(f"--model {settings.model!r} is no model folder (a folder with config.json and the tokenizer)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(settings.model)
        model = AutoModelForCausalLM.from_pretrained(settings.model, dtype=torch.float32).eval()
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot load model {settings.model!r}: {str(exc).splitlines()[0]}") from None
    prompts, truths, templates = [], [], []
    for _, row in frame.iterrows():
        chat = [dict(m) for m in row["prompt"]]
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        prompts += [list(map(int, ids))] * settings.n
        truths += [row["reward_model"]["ground_truth"]] * settings.n
        templates.append(row["extra_info"]["template"])
    return Problems(model, tokenizer, prompts, truths, templates[0])


def sample_and_grade(problems: Problems, settings: DoseSettings, sigma: float, trace: list[TokenStep] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return, per sample drawn at strength ``sigma`` (the sampler seeded by ``settings.seed``), Σ_t (log μ − log π),
    Σ_t k3, its token count and its reward (1 when the grader scores it correct, else 0)."""
    from precision_rl.reward.grader import grade_batch

    eos_id = problems.tokenizer.eos_token_id
    generator = torch.Generator().manual_seed(settings.seed)
    responses, k1, k3, lengths = sample_with_noise(problems.model, problems.prompts, sigma, settings.seed,
                                                   settings.temperature, settings.max_tokens, eos_id, generator, trace)
    texts = problems.tokenizer.batch_decode(responses, skip_special_tokens=True)
    truncated = [len(r) >= settings.max_tokens and r[-1] != eos_id for r in responses]
    grades = grade_batch(texts, problems.truths, problems.template, truncated)
    return k1, k3, lengths, np.array([float(g.acc) for g in grades])


def measure(settings: DoseSettings, sigmas: tuple[float, ...], progress=print) -> list[DosePoint]:
    """Return one DosePoint per strength, each from ``settings.prompts`` × ``settings.n`` fresh samples."""
    problems = load_problems(settings)
    points = []
    for sigma in sigmas:
        k1, k3, lengths, rewards = sample_and_grade(problems, settings, sigma)
        point = DosePoint(sigma, len(k1), float(lengths.mean()), float(k1.mean()),
                          float(k1.std(ddof=1) / math.sqrt(len(k1))), float(k3.mean()), float(rewards.mean()))
        progress(f"sigma {sigma:g}: KL[mu||pi] per sequence {point.sequence_kl:.3g} ± {point.sequence_kl_sem:.2g}, "
                 f"accuracy {point.accuracy:.3f}")
        points.append(point)
    return points


def _sigmas(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise UserError(f"--sigmas takes comma-separated strengths >= 0 (e.g. 0.5,1,2), got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    """Measure the dose of each strength, print a table and write it as JSON; return the exit code."""
    from precision_rl.launch.runs import hardware, utc_stamp
    from precision_rl.tiny.shipped import SHIPPED_DIR

    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--sigmas", default=",".join(f"{s:g}" for s in DEFAULT_SIGMAS))
    parser.add_argument("--model", default=str(SHIPPED_DIR))
    parser.add_argument("--data", default=DEFAULT_DATA, help="a verl parquet or a data recipe under the data root")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=16, help="samples per prompt")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42, help="the noise field's seed and the sampler's")
    parser.add_argument("--out", type=Path, help="where to write the JSON (default: runs/mismatch/synthetic-dose-<UTC "
                        f"time>.json; the committed calibration is {SYNTHETIC_DOSE_FILE.relative_to(REPO_ROOT)})")
    args = parser.parse_args(argv)
    out = args.out or mismatch_root() / f"synthetic-dose-{utc_stamp()}.json"
    try:
        sigmas = _sigmas(args.sigmas)
        if args.prompts < 1 or args.n < 1 or args.max_tokens < 1 or not args.temperature > 0:
            raise UserError("--prompts, --n and --max-tokens must be >= 1 and --temperature > 0")
        if out.exists():
            raise UserError(f"{out} exists: choose another --out (an earlier calibration is never overwritten)")
        settings = DoseSettings(args.model, args.data, args.prompts, args.n, args.temperature, args.max_tokens,
                                args.seed)
        torch.set_num_threads(max(1, torch.get_num_threads()))
        points = measure(settings, sigmas, progress=lambda line: print(line, file=sys.stderr))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render_table([[f"{p.sigma:g}", f"{p.sequence_kl:.3g}", f"{p.sequence_kl_sem:.2g}", f"{p.sequence_kl_k3:.3g}",
                         f"{p.mean_tokens:.1f}", f"{p.accuracy:.3f}"] for p in points],
                       ["sigma", "KL[mu||pi]/seq", "± sem", "k3/seq", "tokens/seq", "accuracy"], floatfmt=""))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, {"settings": asdict(settings) | {"model": shown_model(settings.model)}, "command": [*COMMAND.split(), *(argv or sys.argv[1:])],
                            "hardware": hardware(), "points": [asdict(p) for p in points]})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
