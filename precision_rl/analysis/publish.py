"""Publishing runs: copying a run's manifest, attempt files and held-out records into a committed root
(``results/logs``, ``results/reference``, ``results/calibration``), with the rules of what may be published and when a
published run of an older configuration is retired first. Reading logs is ``analysis/logs.py``'s.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from precision_rl.analysis.logs import run_dirs_under
from precision_rl.config.algorithms import AlgorithmSettings, verl_algorithm_overrides
from precision_rl.config.scale import TINY
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_dir
from precision_rl.launch import runs
from precision_rl.launch.overrides import ALGORITHM_FIELDS
from precision_rl.tiny.data import instrument_problem, instrument_record
from precision_rl.tiny.heldout import RECORDS_DIR as HELDOUT_RECORDS_DIR
from precision_rl.tiny.shipped import SHIPPED_DIR


def publish_problem(manifest: dict, registered_only: bool = True) -> str | None:
    """Return why a run may not be published (unfinished, or, where ``registered_only``, not the experiment as
    registered or, at tiny scale, not made with the shipped instrument), or None."""
    status = runs.effective_status(manifest)
    if status != runs.FINISHED:
        return f"{status}, not finished"
    if registered_only and manifest.get("extra_overrides"):
        return f"run with extra overrides {' '.join(manifest['extra_overrides'])}, not the registered experiment"
    try:
        stale = stale_algorithm_overrides(manifest) if registered_only else []
    except UserError as exc:
        return f"its algorithm cannot be rendered from its manifest ({exc})"
    if stale:
        return (f"its algorithm was rendered by an older suite (today's rendering adds {' '.join(stale)}): "
                f"rerun it")
    if registered_only and manifest.get("scale") == TINY:
        return instrument_problem(manifest.get("tiny_instrument"), instrument_record(SHIPPED_DIR))
    return None


def stale_algorithm_overrides(manifest: dict) -> list[str]:
    """Return the verl overrides that today's suite renders for the run's algorithm and ``hyper``
    (``verl_algorithm_overrides``) and that its recorded ``verl_overrides`` lack: empty where the run took the
    algorithm as it is rendered now, or where the manifest records no overrides (a synthetic run)."""
    if "verl_overrides" not in manifest:
        return []
    spec = manifest.get("spec") or {}
    hyper = spec.get("hyper") if isinstance(spec, dict) else None
    overrides = manifest.get("verl_overrides") or []
    if not isinstance(hyper or {}, dict) or not isinstance(overrides, list):
        raise UserError("manifest: spec.hyper must be a mapping and verl_overrides a list")
    settings = AlgorithmSettings(**{name: (hyper or {}).get(name) for name in ALGORITHM_FIELDS})
    return [o for o in verl_algorithm_overrides(manifest.get("algorithm"), settings) if o not in set(overrides)]


def superseded_runs(run_dirs: list[Path], dest: Path) -> list[tuple[Path, str]]:
    """Return the runs published under ``dest`` that ``run_dirs`` supersede, each with its configuration key: the
    published runs of the same scale and experiment whose configuration (``runs.configuration_key``) differs from
    theirs. Runs of two configurations of one experiment among ``run_dirs`` are a UserError."""
    keys: dict[tuple[str, str], set[str]] = {}
    for run_dir in map(Path, run_dirs):
        manifest = runs.read_manifest(run_dir)
        keys.setdefault((manifest["scale"], manifest["experiment"]), set()).add(runs.configuration_key(manifest))
    out = []
    for (scale, experiment), new in sorted(keys.items()):
        if len(new) > 1:
            raise UserError(f"runs of {len(new)} configurations of {experiment} ({scale} scale) chosen "
                            f"({', '.join(sorted(new))}): publish one configuration")
        for published in run_dirs_under(Path(dest) / scale / experiment):
            key = runs.configuration_key(runs.read_manifest(published))
            if key not in new:
                out.append((published, key))
    return out


def retire_superseded(run_dirs: list[Path], dest: Path) -> list[tuple[Path, str]]:
    """Remove from ``dest`` the published runs that ``run_dirs`` supersede (``superseded_runs``; the git history
    keeps them); return what was removed, each with its configuration key."""
    gone = superseded_runs(run_dirs, dest)
    for path, _ in gone:
        shutil.rmtree(path)
    return gone


def publish_runs(run_dirs: list[Path], dest: Path, registered_only: bool = True) -> list[Path]:
    """Copy each run's logs (``_copy_logs``) into ``dest`` (the same relative layout); return the copies.

    Only finished runs are published, and where ``registered_only`` only runs of an experiment as registered. A run
    published before is replaced by its current logs (a resumed run's logs grow). The published runs of an
    experiment share one configuration: where ``dest`` holds runs of another (``superseded_runs``), nothing is
    copied and a UserError says so (``retire_superseded`` moves them out first).
    """
    manifests = {Path(run_dir): runs.read_manifest(run_dir) for run_dir in run_dirs}
    for run_dir, manifest in manifests.items():
        if problem := publish_problem(manifest, registered_only):
            raise UserError(f"{run_dir} is not published: {problem}")
    if superseded := superseded_runs(list(manifests), dest):
        (first, key), n = superseded[0], len(superseded)
        raise UserError(f"{dest} holds {n} published run(s) of another configuration ({key}, e.g. {first}): "
                        f"publish with --retire (make publish RETIRE=1) to move them out; git history keeps them")
    return [_copy_logs(run_dir, manifest, dest) for run_dir, manifest in manifests.items()]


def publish_calibration_runs(run_dirs: list[Path], dest: Path) -> list[Path]:
    """Copy each run's logs (``_copy_logs``) into ``dest`` whatever its status and overrides (a calibration run
    is often stopped once its trend is clear); return the copies. A run published before is replaced by its current
    logs; runs of several configurations of one experiment sit side by side."""
    return [_copy_logs(Path(run_dir), runs.read_manifest(run_dir), dest) for run_dir in run_dirs]


def _copy_logs(run_dir: Path, manifest: dict, dest: Path) -> Path:
    """Copy a run's manifest, attempt files and held-out records (``make heldout``, where measured) to its place under
    ``dest`` (the runs root's layout); return it."""
    target = dest / manifest["scale"] / manifest["experiment"] / run_dir.parent.name / run_dir.name
    with atomic_dir(target) as tmp:
        for path in [run_dir / runs.MANIFEST, *runs.attempt_files(run_dir)]:
            shutil.copy2(path, tmp / path.name)
        if records := sorted((run_dir / HELDOUT_RECORDS_DIR).glob("*.json")):
            (tmp / HELDOUT_RECORDS_DIR).mkdir()
            for path in records:
                shutil.copy2(path, tmp / HELDOUT_RECORDS_DIR / path.name)
    return target
