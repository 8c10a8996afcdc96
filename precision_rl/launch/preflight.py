"""The paper-scale preflight: what would fail before a multi-day run starts, one line per check with its fix.

``make preflight EXP=... [GPUS=...] [NNODES=...]`` prints the table and exits 1 when a line fails; ``make run
SCALE=paper`` runs it first and stops on a failed line unless ``PREFLIGHT=skip``. It never starts training and writes
nothing but its report (standard output). On a machine without GPUs every GPU line fails with its reason, which is
how the tests exercise it. Nothing here has run on a GPU node of ours: the GPU lines follow torch's and NVIDIA's
documented interfaces.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from precision_rl.config.registry import ExperimentSpec
from precision_rl.console import render_table
from precision_rl.locks import GPU_PINS, normalized, pinned_versions
from precision_rl.paths import data_root, runs_root

PASS, FAIL, UNKNOWN = "✔", "✘", "?"
# The sanity scripts ran on one node of 8 A100-80GB (docs/sources.md#verl-fork); the other families publish no
# hardware, so the suite asks the same of them.
PAPER_GPU_MEMORY_GB = 80
GPU_MEMORY_SLACK = 0.9  # an "80 GB" GPU reports a little less to torch
# The packages whose versions a paper-scale run relies on, by their name in requirements/gpu.lock.
LOCKED_PACKAGES = ("torch", "vllm", "verl", "transformers", "flash-attn")
# Bytes a checkpoint keeps per model parameter: fp32 weights and Adam's two fp32 moments (FSDP's optimizer state).
CHECKPOINT_BYTES_PER_PARAM = 12
NCCL_TIMEOUT_S = 120


@dataclass(frozen=True)
class Line:
    """One preflight check: what it checked, its status (``PASS``, ``FAIL`` or ``UNKNOWN``), what it found and, where
    it did not pass, the fix."""

    check: str
    status: str
    found: str
    fix: str = ""


@dataclass(frozen=True)
class Target:
    """What the run needs: its experiment, and the GPUs per node and nodes it will use."""

    spec: ExperimentSpec
    gpus_per_node: int
    nnodes: int


def cuda_devices() -> list[tuple[str, int]]:
    """Return (name, total memory in bytes) of each CUDA GPU torch sees (none without CUDA)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        return [(torch.cuda.get_device_properties(i).name, int(torch.cuda.get_device_properties(i).total_memory))
                for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a broken CUDA stack counts as no GPU
        return []


def installed_version(package: str) -> str | None:
    """Return the installed version of ``package`` (None where it is not installed)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_gpus(target: Target, devices: list[tuple[str, int]]) -> Line:
    """Return whether this node has the GPUs the run asks per node."""
    need = target.gpus_per_node
    if not devices:
        return Line("GPUs", FAIL, "no CUDA GPU visible to torch",
                    f"run on a node with {need} CUDA GPU(s); on a CPU machine use SCALE=tiny")
    found = f"{len(devices)} × {devices[0][0]}" if len({d[0] for d in devices}) == 1 else \
        ", ".join(name for name, _ in devices)
    if len(devices) < need:
        return Line("GPUs", FAIL, f"{found}; the run asks {need} per node",
                    f"run on a node with {need} GPUs, or GPUS={len(devices)} (a smaller batch per GPU may not fit)")
    return Line("GPUs", PASS, f"{found} (the run asks {need} per node)")


def check_gpu_memory(devices: list[tuple[str, int]]) -> Line:
    """Return whether every GPU has the memory the paper's runs had."""
    need = PAPER_GPU_MEMORY_GB
    if not devices:
        return Line("GPU memory", FAIL, "no CUDA GPU to measure", f"GPUs of {need} GB, as the paper's A100-80GB")
    small = [(name, size) for name, size in devices if size < GPU_MEMORY_SLACK * need * 1e9]
    smallest = min(size for _, size in devices) / 1e9
    if small:
        return Line("GPU memory", FAIL, f"{len(small)} GPU(s) of {small[0][1] / 1e9:.0f} GB ({small[0][0]})",
                    f"GPUs of {need} GB, as the paper's A100-80GB; with less, lower "
                    "actor_rollout_ref.rollout.gpu_memory_utilization and the micro-batches (EXTRA=...)")
    return Line("GPU memory", PASS, f"{smallest:.0f} GB or more on each GPU (the paper's: {need} GB)")


def check_driver(run: Callable[[list[str]], str | None]) -> Line:
    """Return the NVIDIA driver and the CUDA version torch was built for."""
    driver = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    try:
        import torch

        cuda = torch.version.cuda
    except Exception:  # noqa: BLE001
        cuda = None
    if not driver:
        return Line("driver / CUDA", FAIL, f"nvidia-smi not found or failing; torch built for CUDA {cuda or 'none'}",
                    "install the NVIDIA driver, new enough for the CUDA build of gpu.lock's torch "
                    f"{pinned_versions(*GPU_PINS).get('torch', '?')} (environment.yml)")
    if not cuda:
        return Line("driver / CUDA", FAIL, f"driver {driver.splitlines()[0]}; this torch has no CUDA",
                    "create the GPU environment: conda env create -f environment.yml")
    return Line("driver / CUDA", PASS, f"driver {driver.splitlines()[0]}, torch built for CUDA {cuda}")


def check_packages(version_of: Callable[[str], str | None] = installed_version) -> list[Line]:
    """Return one line per package of ``LOCKED_PACKAGES``: its installed version against requirements/gpu.lock."""
    pins = pinned_versions(*GPU_PINS)
    lines = []
    for package in LOCKED_PACKAGES:
        want, have = pins.get(normalized(package)), version_of(package)
        name = f"{package} version"
        if want is None:
            lines.append(Line(name, UNKNOWN, f"{have or 'not installed'}; requirements/gpu.lock pins no version"))
        elif have is None:
            lines.append(Line(name, FAIL, f"not installed (gpu.lock: {want})",
                              "create the GPU environment: conda env create -f environment.yml"))
        elif have.split("+")[0] != want:
            lines.append(Line(name, FAIL, f"{have} installed, gpu.lock pins {want}",
                              f"pip install {package}=={want} (or recreate the GPU environment from environment.yml)"))
        else:
            lines.append(Line(name, PASS, f"{have} (gpu.lock)"))
    return lines


def cached_model_dir(model: str) -> Path | None:
    """Return the local folder of ``model``: the path itself, or its snapshot in the HF cache (None where neither)."""
    if Path(model).expanduser().is_dir():
        return Path(model).expanduser()
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def hub_problem(model: str) -> str | None:
    """Return why ``model`` cannot be fetched from the Hugging Face hub now, or None when it can."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(model, timeout=10)
    except Exception as exc:  # noqa: BLE001 - any failure means the download would fail too
        return " ".join(str(exc).split())[:160] or type(exc).__name__
    return None


def check_model(spec: ExperimentSpec) -> Line:
    """Return whether the experiment's model is on this machine or can be downloaded."""
    local = cached_model_dir(spec.model)
    if local is not None:
        return Line("model", PASS, f"{spec.model} at {local}")
    why = hub_problem(spec.model)
    if why is None:
        return Line("model", PASS, f"{spec.model}: not cached, reachable on the hub (downloaded at the first step)")
    return Line("model", FAIL, f"{spec.model}: not in the local HF cache, and the hub is unreachable ({why})",
                f"huggingface-cli download {spec.model} on a machine with internet, into this HF cache")


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def check_datasets(spec: ExperimentSpec, root: Path) -> list[Line]:
    """Return one line per dataset the experiment reads: present, with the rows its recipe expects and the checksum
    data/MANIFEST.json recorded when it was built."""
    from precision_rl.data.recipes import RECIPES, dataset_file
    from precision_rl.data.store import read_manifest
    from precision_rl.fileio import sha256_file

    manifest = read_manifest(root) if (root / "MANIFEST.json").is_file() else {}
    lines = []
    for name, split in [(spec.data.train, "train"), *((v, "test") for v in spec.data.val)]:
        path = dataset_file(root, name, split, spec.template)
        check, fix = f"dataset {name}", f"make data DATA='{name}'"
        if not path.is_file():
            lines.append(Line(check, FAIL, f"{path} is missing", fix))
            continue
        rows, recipe = _parquet_rows(path), RECIPES.get(name)
        expected = recipe.expected_rows if recipe else None
        if expected is not None and rows != expected:
            lines.append(Line(check, FAIL, f"{path.name}: {rows} rows, the recipe expects {expected}",
                              f"{fix} OVERWRITE=1"))
            continue
        recorded = ((manifest.get(name) or {}).get("files") or {}).get(path.name, {}).get("sha256")
        if recorded is None:
            lines.append(Line(check, UNKNOWN, f"{rows} rows; data/MANIFEST.json records no checksum of it",
                              f"{fix} OVERWRITE=1 records one"))
        elif sha256_file(path) != recorded:
            lines.append(Line(check, FAIL, f"{path.name}: checksum differs from data/MANIFEST.json's",
                              f"{fix} OVERWRITE=1"))
        else:
            lines.append(Line(check, PASS, f"{rows} rows, checksum as built"))
    return lines


def model_parameters(model_dir: Path | None) -> int | None:
    """Return the model's parameter count from its safetensors index or files (None where it cannot be read)."""
    if model_dir is None:
        return None
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        if total:
            return int(total) // 2  # the hub's checkpoints of these models are 16-bit
    files = list(model_dir.glob("*.safetensors"))
    return sum(f.stat().st_size for f in files) // 2 if files else None


def check_disk(spec: ExperimentSpec, where: Path, free_bytes: Callable[[Path], int]) -> Line:
    """Return whether the runs folder has room for two checkpoints of the model with its optimizer state."""
    existing = next((p for p in [where, *where.parents] if p.exists()), Path("/"))
    free = free_bytes(existing)
    params = model_parameters(cached_model_dir(spec.model))
    if params is None:
        return Line("disk", UNKNOWN, f"{free / 1e9:.0f} GB free at {existing}; the model's size is unknown until it "
                    "is downloaded", f"about {CHECKPOINT_BYTES_PER_PARAM} bytes per parameter per checkpoint")
    need = 2 * params * CHECKPOINT_BYTES_PER_PARAM
    found = (f"{free / 1e9:.0f} GB free at {existing}; two checkpoints of {params / 1e9:.1f}B parameters with Adam "
             f"state take ~{need / 1e9:.0f} GB")
    if free < need:
        return Line("disk", FAIL, found, "free space there, or RUNS_DIR=<a larger disk>")
    return Line("disk", PASS, found)


NCCL_SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

    def work(rank, world):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
        dist.init_process_group("nccl", rank=rank, world_size=world)
        torch.cuda.set_device(rank)
        x = torch.ones(1, device="cuda") * (rank + 1)
        dist.all_reduce(x)
        assert int(x.item()) == world * (world + 1) // 2, x.item()
        dist.destroy_process_group()

    mp.spawn(work, args=(int(sys.argv[1]),), nprocs=int(sys.argv[1]))
""")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_nccl(devices: list[tuple[str, int]], gpus: int) -> Line:
    """Return whether one NCCL all-reduce across this node's GPUs completes (the run's first collective)."""
    if not devices:
        return Line("NCCL all-reduce", FAIL, "no CUDA GPU to reduce across", "run on the GPU node")
    world = min(gpus, len(devices))
    try:
        done = subprocess.run([sys.executable, "-c", NCCL_SCRIPT, str(world), str(_free_port())],
                              capture_output=True, text=True, timeout=NCCL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Line("NCCL all-reduce", FAIL, f"no answer across {world} GPU(s) in {NCCL_TIMEOUT_S} s",
                    "check NCCL_P2P_DISABLE / NCCL_IB_DISABLE and the GPUs' topology (nvidia-smi topo -m)")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return Line("NCCL all-reduce", FAIL, f"failed across {world} GPU(s): {last}",
                    "NCCL_DEBUG=INFO python -c ... shows why; check the driver and NCCL versions")
    return Line("NCCL all-reduce", PASS, f"one all-reduce across {world} GPU(s)")


def check_wall_time(spec: ExperimentSpec) -> Line:
    """Return what the run's length is known to be; no step time of a paper-scale run is committed or published."""
    hyper = spec.hyper
    steps = hyper.total_training_steps
    shape = (f"{steps or 'the epochs of'} steps × {hyper.train_batch_size} prompts × {hyper.rollout_n} samples, up to "
             f"{hyper.max_response_length} tokens each")
    return Line("expected wall time", UNKNOWN, f"{shape}; neither the paper nor results/logs gives a paper-scale step "
                "time to multiply", "the first steps' timing_s/step in the run's metrics give it")


def _run_quietly(argv: list[str]) -> str | None:
    """Return a command's standard output, or None where it is absent or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def preflight(target: Target, devices: list[tuple[str, int]] | None = None,
              version_of: Callable[[str], str | None] = installed_version,
              free_bytes: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free,
              run: Callable[[list[str]], str | None] = _run_quietly) -> list[Line]:
    """Return every check's line for ``target`` on this machine (``devices``: this node's GPUs, default the ones
    torch sees); each check runs whatever the others found."""
    devices = cuda_devices() if devices is None else devices
    return [check_gpus(target, devices), check_gpu_memory(devices), check_driver(run), *check_packages(version_of),
            check_model(target.spec), *check_datasets(target.spec, data_root()),
            check_disk(target.spec, runs_root(), free_bytes), check_nccl(devices, target.gpus_per_node),
            check_wall_time(target.spec)]


def report(target: Target, lines: list[Line]) -> str:
    """Return the preflight's table and its closing line."""
    spec = target.spec
    table = render_table([[line.status, line.check, line.found, line.fix] for line in lines],
                         ["", "check", "found", "fix"])
    failing = [line.check for line in lines if line.status == FAIL]
    unknown = any(line.status == UNKNOWN for line in lines)
    head = (f"preflight of {spec.name} at paper scale: {target.nnodes} node(s) × {target.gpus_per_node} GPU(s), "
            f"{spec.model}")
    tail = (f"{len(failing)} check(s) failed: {', '.join(failing)}" if failing
            else "nothing failed" + (f" ({UNKNOWN} lines could not be checked)" if unknown else ""))
    return f"{head}\n{table}\n{tail}"


def failed(lines: list[Line]) -> bool:
    """Return True when any line failed."""
    return any(line.status == FAIL for line in lines)
