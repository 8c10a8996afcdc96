"""The synthetic rungs' doses, as experiments/ladder/README.md shows them: one row per noise strength of the committed
calibration (``results/calibration/synthetic_dose.json``, ``make synthetic-dose``), with the experiments the registry
runs at that strength.

``python -m precision_rl.analysis.synthetic_doses [--readme experiments/ladder/README.md]`` prints the block and
rewrites it in the README; ``make published-results`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from precision_rl.analysis.plotting import ALGORITHM_LABELS
from precision_rl.analysis.readme_blocks import ReadmeBlock, write_block
from precision_rl.config import registry
from precision_rl.config.scale import TINY
from precision_rl.console import render_table
from precision_rl.errors import UserError
from precision_rl.metrics import PAPER_SEQUENCE_KL
from precision_rl.paths import REPO_ROOT, SYNTHETIC_DOSE_FILE

BLOCK = ReadmeBlock("<!-- synthetic doses (tiny scale): written by `make published-results` from "
                    "results/calibration/synthetic_dose.json and the registry -->", "<!-- end of synthetic doses -->")
POINT_KEYS = ("sigma", "sequences", "sequence_kl", "sequence_kl_sem", "sequence_kl_k3", "accuracy")
HEADERS = ("noise σ", "per-sequence KL[μ‖π] (k1 ± s.e.)", "by k3", "the noised sampler's accuracy",
           "experiments (`EXP=`, arm `fp16`; each with its `_control`)")


def read_doses(path: Path = SYNTHETIC_DOSE_FILE) -> dict:
    """Return the calibration file's content (``settings``, ``command``, ``hardware``, ``points``); a UserError
    naming the file where it is missing or a point lacks one of ``POINT_KEYS``."""
    path = Path(path)
    try:
        doses = json.loads(path.read_text())
        points = doses["points"]
        missing = sorted({k for point in points for k in POINT_KEYS if k not in point})
    except FileNotFoundError:
        raise UserError(f"no synthetic-dose calibration at {path}: run `make synthetic-dose`") from None
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{path} is not a synthetic-dose calibration ({err})") from None
    if missing:
        raise UserError(f"{path}: a point lacks {', '.join(missing)}")
    return doses


def rungs_by_sigma(root: Path = registry.EXPERIMENTS_DIR) -> dict[float, list[tuple[str, str]]]:
    """Return each noise strength the registry runs with the (experiment, algorithm) of its synthetic rungs (the
    experiments whose rollout carries noise and whose trainer does not; each rung's control is ``<rung>_control``)."""
    out: dict[float, list[tuple[str, str]]] = {}
    for name in registry.experiment_files(root):
        spec = registry.load_experiment(name, TINY, root)
        sigma = spec.hyper.rollout_logit_noise
        if sigma and not spec.hyper.logit_noise_in_trainer:
            out.setdefault(float(sigma), []).append((name, spec.algorithm))
    return out


def _sigma_text(sigma: float) -> str:
    return f"{sigma:g}"


def _kl_text(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _names_text(names: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` ({ALGORITHM_LABELS.get(algorithm, algorithm)})" for name, algorithm in names)


def dose_section(doses: dict, rungs: dict[float, list[tuple[str, str]]]) -> str:
    """Return the block's body: the table of the calibrated strengths (σ = 0 left out: no noise, no rung), a strength
    the registry runs but the calibration lacks flagged in a row of its own, then how the calibration was made and
    where the paper's BF16 level falls."""
    points = sorted((p for p in doses["points"] if p["sigma"] > 0), key=lambda p: p["sigma"])
    rows = []
    for point in points:
        names = rungs.get(float(point["sigma"]), [])
        rows.append([_sigma_text(point["sigma"]),
                     f"{_kl_text(point['sequence_kl'])} ± {point['sequence_kl_sem']:.2f}",
                     _kl_text(point["sequence_kl_k3"]), f"{point['accuracy']:.2f}",
                     _names_text(names) or "(none yet)"])
    calibrated = {float(p["sigma"]) for p in points}
    for sigma in sorted(set(rungs) - calibrated):
        rows.append([_sigma_text(sigma), "not calibrated", "", "", _names_text(rungs[sigma])])
    table = render_table(rows, HEADERS, markdown=True, floatfmt="")
    settings, hardware = doses.get("settings", {}), doses.get("hardware", {})
    clean = next((p for p in doses["points"] if p["sigma"] == 0), None)
    bf16 = PAPER_SEQUENCE_KL["bf16"]
    below = [p["sigma"] for p in points if p["sequence_kl"] < bf16]
    above = [p["sigma"] for p in points if p["sequence_kl"] >= bf16]
    where = (f"between σ = {_sigma_text(max(below))} and σ = {_sigma_text(min(above))}" if below and above else
             "above every calibrated strength" if below else "below every calibrated strength")
    command = " ".join(doses.get("command", [])[3:])
    return "\n".join([
        table, "",
        f"The doses are the committed calibration, `{SYNTHETIC_DOSE_FILE.relative_to(REPO_ROOT)}`, made by "
        f"`make synthetic-dose ARGS='{command}'`: the shipped model in fp32 on the first {settings.get('prompts')} "
        f"prompts of the tiny sanity set, {settings.get('n')} samples each, T = {settings.get('temperature'):g}, at most "
        f"{settings.get('max_tokens')} tokens, as the instrument samples its training batch; ± is the standard error over "
        f"the {points[0]['sequences'] if points else 0:,} sequences ({hardware.get('cpu_count')}-core "
        f"{hardware.get('cpu_model')}, {hardware.get('cpu_id')}). "
        + (f"The noise-free sampler scores {clean['accuracy']:.3f} there. " if clean else "")
        + f"The paper's BF16 level ({bf16}) lies {where}."])


def main(argv: list[str] | None = None) -> int:
    """Print the block; with ``--readme`` rewrite it there; return 0 (1 with one line on a bad calibration file)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, help="the README whose block to rewrite")
    parser.add_argument("--doses", type=Path, default=SYNTHETIC_DOSE_FILE, help="the calibration file")
    args = parser.parse_args(argv)
    try:
        body = dose_section(read_doses(args.doses), rungs_by_sigma())
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(body)
    write_block(args.readme, BLOCK, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
