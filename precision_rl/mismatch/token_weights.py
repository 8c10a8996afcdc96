"""Where GRPO-Token-TIS's token weights fall at a synthetic dose, measured offline on the shipped model.

A Token-TIS rung's rollout samples from μ = softmax((z + σ·noise) / T) while its trainer computes π = softmax(z / T);
each token's policy-gradient term A·∇log π(token) is multiplied by w = min(π/μ, C). This tool draws one batch as
the experiment's first step would (its data, samples per prompt, temperature, response length, dose and cap, from
the registry), grades it, forms GRPO's advantages per prompt group, and reports per token:

- w, and the norm of the gradient of log π(token) with respect to the logits, ‖e_token − π‖ / T: large where π
  gave the token little probability;
- the batch's policy-gradient mass at the logits, Σ |A|·‖e_token − π‖ / T over tokens (the sum of per-token norms,
  an upper bound on the norm of their sum, and at the logits, not at the parameters), and the share of it that the
  weights keep, Σ w·|A|·‖…‖ / Σ |A|·‖…‖, beside the weights' plain mean;
- the same split by bins of w: which tokens carry the mass, how much of it each bin keeps, and how much of a bin's
  mass comes from answers above their group's mean (A > 0) rather than below it.

``make token-weights [ARGS='--experiment ladder/synthetic_s3_grpo_token_tis --prompts 64 --seed 42 --out FILE']``
prints the tables and writes a JSON record (settings, command, this machine's CPU); it never overwrites one.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from precision_rl.config.algorithms import TOKEN_WEIGHTED
from precision_rl.console import render_table
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_json
from precision_rl.mismatch.synthetic_dose import DoseSettings, TokenStep, load_problems, sample_and_grade, shown_model
from precision_rl.paths import mismatch_root

COMMAND = "python -m precision_rl.mismatch.token_weights"
DEFAULT_EXPERIMENT = "ladder/synthetic_s3_grpo_token_tis"
WEIGHT_EDGES = (0.1, 0.5, 1.0)  # the bins of w below the cap C: [0, 0.1), [0.1, 0.5), [0.5, 1), [1, C), then w = C


@dataclass(frozen=True)
class WeightBin:
    """The tokens whose weight falls in one bin, as shares of the batch."""

    label: str
    token_share: float  # share of the batch's tokens
    mean_pi: float  # mean π(token) of its tokens
    mean_logit_grad: float  # mean ‖e_token − π‖ / T of its tokens
    mass_share: float  # share of the batch's unweighted gradient mass Σ |A|·‖e − π‖/T
    kept_share: float  # Σ w·|A|·‖e − π‖/T of its tokens over the batch's unweighted mass
    positive_share: float  # share of its own unweighted mass from samples with A > 0 (answers above their group)


@dataclass(frozen=True)
class TokenWeightStudy:
    """One batch's token weights and where its gradient mass lies."""

    experiment: str
    sigma: float
    cap: float
    sequences: int
    tokens: int
    reward: float  # mean reward of the batch (the noised sampler's accuracy)
    mean_weight: float  # mean of w over tokens
    mean_weight_with_advantage: float  # mean of w over the tokens of sequences with A ≠ 0
    mass_kept: float  # Σ w·|A|·‖e − π‖/T over Σ |A|·‖e − π‖/T
    rank_correlation: float  # Spearman's ρ between w and ‖e − π‖/T over the tokens of sequences with A ≠ 0
    bins: tuple[WeightBin, ...]


def group_advantages(rewards: np.ndarray, group: int, by_std: bool) -> np.ndarray:
    """Return GRPO's advantage per sample: its reward minus its group's mean (consecutive groups of ``group``),
    divided by the group's standard deviation + 1e-6 when ``by_std`` (verl's ``compute_grpo_outcome_advantage``)."""
    if rewards.size % group:
        raise ValueError(f"{rewards.size} rewards do not split into groups of {group}")
    grouped = rewards.reshape(-1, group)
    centred = grouped - grouped.mean(1, keepdims=True)
    if by_std:
        centred = centred / (grouped.std(1, ddof=1, keepdims=True) + 1e-6)
    return centred.reshape(-1)


def spearman(first: np.ndarray, second: np.ndarray) -> float:
    """Return Spearman's rank correlation of two samples (ties share their mean rank; nan when either is flat)."""
    import pandas as pd

    if len(first) < 2 or np.ptp(first) == 0 or np.ptp(second) == 0:
        return float("nan")
    ranks = [pd.Series(values).rank(method="average").to_numpy() for values in (first, second)]
    return float(np.corrcoef(*ranks)[0, 1])


def summarize(trace: list[TokenStep], advantages: np.ndarray, cap: float, experiment: str, sigma: float,
              rewards: np.ndarray) -> TokenWeightStudy:
    """Return the study of one sampled batch from its decoding ``trace`` and per-sample ``advantages``."""
    rows = np.concatenate([step.rows for step in trace])
    weight = np.minimum(np.exp(np.concatenate([s.log_pi - s.log_mu for s in trace])), cap)
    pi = np.exp(np.concatenate([step.log_pi for step in trace]))
    grad = np.concatenate([step.logit_grad_norm for step in trace])
    mass = np.abs(advantages[rows]) * grad
    total = mass.sum()
    if not total > 0:
        raise UserError("every sample of the batch has advantage 0 (each group answered alike): no gradient to split;"
                        " draw more prompts")
    edges = tuple(edge for edge in WEIGHT_EDGES if edge < cap)
    lower = (0.0, *edges)
    upper = (*edges, cap)
    masks = [(f"[{lo:g}, {hi:g})", (weight >= lo) & (weight < hi)) for lo, hi in zip(lower, upper, strict=True)]
    masks.append((f"= C = {cap:g}", weight >= cap))
    positive = advantages[rows] > 0
    bins = tuple(WeightBin(label, float(m.mean()), float(pi[m].mean()) if m.any() else float("nan"),
                           float(grad[m].mean()) if m.any() else float("nan"), float(mass[m].sum() / total),
                           float((weight[m] * mass[m]).sum() / total),
                           float(mass[m & positive].sum() / mass[m].sum()) if mass[m].sum() > 0 else float("nan"))
                 for label, m in masks)
    learning = advantages[rows] != 0
    return TokenWeightStudy(experiment, sigma, cap, len(advantages), len(weight), float(rewards.mean()),
                            float(weight.mean()), float(weight[learning].mean()), float((weight * mass).sum() / total),
                            spearman(weight[learning], grad[learning]), bins)


@dataclass(frozen=True)
class StudySettings:
    """What the study samples: the experiment it reads its dose, cap and sampling from, and the batch drawn."""

    experiment: str
    prompts: int
    seed: int


def experiment_dose(name: str) -> tuple[DoseSettings, float, float, bool]:
    """Return the sampling settings (with the shipped model and the first prompts of the experiment's training set),
    the dose σ, the cap C and whether advantages divide by the group's std, all read from the registry at tiny
    scale; a UserError for an experiment without a rollout dose or whose algorithm does not weigh tokens."""
    from precision_rl.config.registry import load_experiment
    from precision_rl.tiny.shipped import SHIPPED_DIR

    spec = load_experiment(name, "tiny")
    hyper = spec.hyper
    if not hyper.rollout_logit_noise or hyper.logit_noise_in_trainer:
        raise UserError(f"{name} carries no mismatch to weigh (it needs hyper.rollout_logit_noise > 0 on the rollout "
                        f"alone, not a control); e.g. {DEFAULT_EXPERIMENT}")
    if spec.algorithm != TOKEN_WEIGHTED:
        raise UserError(f"{name} runs {spec.algorithm}, whose weights are not per token or not capped: the study weighs "
                        f"the tokens of {TOKEN_WEIGHTED} (e.g. {DEFAULT_EXPERIMENT})")
    settings = DoseSettings(str(SHIPPED_DIR), spec.data.train, 0, hyper.rollout_n, hyper.temperature,
                            hyper.max_response_length, 0)
    return settings, float(hyper.rollout_logit_noise), float(hyper.is_threshold), bool(hyper.norm_adv_by_std)


def study(settings: StudySettings, progress=print) -> TokenWeightStudy:
    """Return the study of one batch of ``settings.prompts`` prompts drawn as ``settings.experiment``'s rollout
    draws them, the noise field and the sampler seeded by ``settings.seed``."""
    from dataclasses import replace

    dose, sigma, cap, by_std = experiment_dose(settings.experiment)
    dose = replace(dose, prompts=settings.prompts, seed=settings.seed)
    problems = load_problems(dose)
    progress(f"{settings.experiment}: sampling {settings.prompts} prompts x {dose.n} at sigma {sigma:g}")
    trace: list[TokenStep] = []
    _, _, _, rewards = sample_and_grade(problems, dose, sigma, trace)
    return summarize(trace, group_advantages(rewards, dose.n, by_std), cap, settings.experiment, sigma, rewards)


def render(result: TokenWeightStudy) -> str:
    """Return the study as two text tables: the batch's summary and its split by bins of w."""
    head = render_table([[result.experiment, f"{result.sigma:g}", f"{result.cap:g}", str(result.sequences),
                          str(result.tokens), f"{result.reward:.3f}", f"{result.mean_weight:.3f}",
                          f"{result.mean_weight_with_advantage:.3f}", f"{result.mass_kept:.3f}",
                          f"{result.rank_correlation:.3f}"]],
                        ["experiment", "sigma", "C", "sequences", "tokens", "reward", "mean w",
                         "mean w (A != 0)", "gradient mass kept", "rank corr. w vs |grad|"], floatfmt="")
    bins = render_table([[b.label, f"{b.token_share:.3f}", f"{b.mean_pi:.3g}", f"{b.mean_logit_grad:.3f}",
                          f"{b.mass_share:.3f}", f"{b.kept_share:.3f}", f"{b.positive_share:.3f}"] for b in result.bins],
                        ["w = min(pi/mu, C)", "tokens", "mean pi(token)", "mean |e - pi|/T", "gradient mass",
                         "mass kept", "of its mass: A > 0"], floatfmt="")
    return f"{head}\n\n{bins}"


def main(argv: list[str] | None = None) -> int:
    """Study one batch's token weights, print the tables and write them as JSON; return the exit code."""
    from precision_rl.launch.runs import hardware, utc_stamp
    from precision_rl.tiny.shipped import SHIPPED_DIR

    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT,
                        help="the registered rung whose dose, cap and sampling settings the batch follows")
    parser.add_argument("--prompts", type=int, default=64, help="prompts in the batch (the quick profile's step: 64)")
    parser.add_argument("--seed", type=int, default=42, help="the noise field's seed and the sampler's")
    parser.add_argument("--out", type=Path, help="where to write the JSON (default: runs/mismatch/token-weights-<UTC "
                                                 "time>.json)")
    args = parser.parse_args(argv)
    out = args.out or mismatch_root() / f"token-weights-{utc_stamp()}.json"
    try:
        if args.prompts < 1 or args.seed < 0:
            raise UserError("--prompts must be >= 1 and --seed >= 0 (a run's noise seed is)")
        if out.exists():
            raise UserError(f"{out} exists: choose another --out (an earlier record is never overwritten)")
        settings = StudySettings(args.experiment, args.prompts, args.seed)
        result = study(settings, progress=lambda line: print(line, file=sys.stderr))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(render(result))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, {"settings": asdict(settings) | {"model": shown_model(str(SHIPPED_DIR))},
                            "command": [*COMMAND.split(), *(argv if argv is not None else sys.argv[1:])],
                            "hardware": hardware(), "result": asdict(result)})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
