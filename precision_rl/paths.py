"""Every root directory the suite reads or writes. Roots that hold user data can be moved by an environment variable."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
EXPERIMENTS_DIR = REPO_ROOT / "experiments"
DOCS_DIR = REPO_ROOT / "docs"
RESULTS_DIR = REPO_ROOT / "results"
FIGURES_DIR = REPO_ROOT / "paper_figures"
QUICK_FIGURES_DIR = FIGURES_DIR / "quick"  # the tiny training figures drawn again in the quick profile
BENCH_DIR = RESULTS_DIR / "bench"
# Committed copies of the logs (manifest and metrics) of the runs behind the committed figures, laid out as runs/.
LOGS_DIR = RESULTS_DIR / "logs"
# Committed logs of short reference runs (configurations the grid does not publish, e.g. the 2-step regression gate):
# `make check` places a run in the band of the committed runs of its configuration, here and in results/logs.
REFERENCE_DIR = RESULTS_DIR / "reference"
# Committed logs of the tiny profile's calibration runs (extra overrides, often stopped before the end), which
# results/calibration/NOTES.md describes: kept so that its tables can be read again from logs; no figure, result table
# or check reads them. Their step times time new runs (``timing_run_roots``): some ran on CPU kinds no published run
# did.
CALIBRATION_DIR = RESULTS_DIR / "calibration"
# The committed dose of each synthetic logit-noise strength (precision_rl.mismatch.synthetic_dose).
SYNTHETIC_DOSE_FILE = CALIBRATION_DIR / "synthetic_dose.json"

DATA_ENV = "PRECISION_RL_DATA"
RUNS_ENV = "PRECISION_RL_RUNS"
CACHE_ENV = "PRECISION_RL_CACHE"
SHARED_DATA_ENV = "PRECISION_RL_SHARED_DATA"
LOGS_ENV = "PRECISION_RL_LOGS"
REFERENCE_ENV = "PRECISION_RL_REFERENCE"
CALIBRATION_ENV = "PRECISION_RL_CALIBRATION"

MISMATCH_DIR = "mismatch"  # the offline mismatch tool's folder inside the runs root
ANALYSIS_DIR = "_analysis"  # inside the runs root: the local runs' table, tables and figures
FIGURES_SUBDIR = "figures"


def data_root() -> Path:
    """Return the dataset root (``$PRECISION_RL_DATA`` or ``<repo>/data``)."""
    return Path(os.environ.get(DATA_ENV, REPO_ROOT / "data")).resolve()


def runs_root() -> Path:
    """Return the root of all run directories (``$PRECISION_RL_RUNS`` or ``<repo>/runs``)."""
    return Path(os.environ.get(RUNS_ENV, REPO_ROOT / "runs")).resolve()


def logs_root() -> Path:
    """Return the published run logs (``$PRECISION_RL_LOGS`` or ``<repo>/results/logs``)."""
    return Path(os.environ.get(LOGS_ENV, LOGS_DIR)).resolve()


def reference_root() -> Path:
    """Return the committed reference runs (``$PRECISION_RL_REFERENCE`` or ``<repo>/results/reference``)."""
    return Path(os.environ.get(REFERENCE_ENV, REFERENCE_DIR)).resolve()


def calibration_root() -> Path:
    """Return the committed calibration runs (``$PRECISION_RL_CALIBRATION`` or ``<repo>/results/calibration``)."""
    return Path(os.environ.get(CALIBRATION_ENV, CALIBRATION_DIR)).resolve()


def committed_run_roots() -> tuple[Path, Path]:
    """Return the folders of committed run logs a new run is compared with: the published logs, then the reference
    runs."""
    return logs_root(), reference_root()


def timing_run_roots() -> tuple[Path, Path, Path]:
    """Return the folders of committed runs whose step times say how long a new run takes (its ETA, the README's
    profile times): the published logs, the reference runs and the calibration runs, which hold runs of the instrument
    on CPU kinds no published run was made on."""
    return logs_root(), reference_root(), calibration_root()


@dataclass(frozen=True)
class AnalysisView:
    """One analysis's sources and outputs: the runs it reads and where its table, tables and figures go."""

    name: str
    runs: Path
    mismatch: Path
    results: Path
    figures: Path


def local_view() -> AnalysisView:
    """Return the view of the local runs: ``<runs root>`` read, everything written under ``<runs root>/_analysis``."""
    out = runs_root() / ANALYSIS_DIR
    return AnalysisView("local", runs_root(), runs_root() / MISMATCH_DIR, out, out / FIGURES_SUBDIR)


def published_view() -> AnalysisView:
    """Return the view of the published logs: ``results/logs`` read, the committed ``results/`` tables and
    ``paper_figures/`` written."""
    return AnalysisView("published", logs_root(), logs_root() / MISMATCH_DIR, RESULTS_DIR, FIGURES_DIR)


def mismatch_root() -> Path:
    """Return ``<runs root>/mismatch``, where the offline mismatch tool writes."""
    return runs_root() / MISMATCH_DIR


def mismatch_roots() -> tuple[Path, Path]:
    """Return the folders offline mismatch results are read from: ``<runs root>/mismatch``, then the published
    copies in ``<published logs>/mismatch``."""
    return mismatch_root(), logs_root() / MISMATCH_DIR


def cache_root() -> Path:
    """Return the project cache (``$PRECISION_RL_CACHE`` or ``<repo>/.cache``): tiny models, vLLM's cache."""
    return Path(os.environ.get(CACHE_ENV, REPO_ROOT / ".cache")).resolve()


def tiny_models_root() -> Path:
    """Return the folder the tiny models are cached in, one subfolder per build key."""
    return cache_root() / "tiny-model"


def vllm_cache_root() -> Path:
    """Return the project's copy of vLLM's cache (``VLLM_CACHE_ROOT`` of the in-process engines; what runs seed
    their own from, ``launch.caches``)."""
    return cache_root() / "vllm"


def inductor_cache_root() -> Path:
    """Return the project's copy of TorchInductor's cache, which runs seed their own from (``launch.caches``)."""
    return cache_root() / "torchinductor"


def shared_data_dir() -> Path:
    """Return the shared data folder (``$PRECISION_RL_SHARED_DATA`` or ``<repo>/../shared/data/precision-rl``)."""
    return Path(os.environ.get(SHARED_DATA_ENV, REPO_ROOT.parent / "shared" / "data" / "precision-rl")).resolve()


# A vLLM engine in a process of its own keeps what it leaves (ipc sockets,
# ``vllm.utils.network_utils.get_open_zmq_ipc_path``; the
# ``vllm_dist_*`` file-store rendezvous, ``vllm.utils.network_utils.get_file_store_init_method``) in one folder when
# both point there.
VLLM_TEMP_ENV = ("VLLM_RPC_BASE_PATH", "TMPDIR")


@contextmanager
def vllm_socket_dir() -> Iterator[Path]:
    """Give an in-process vLLM engine a socket folder of its own for the block, then remove it; yield the folder.

    vLLM creates its ``ipc://`` sockets in ``VLLM_RPC_BASE_PATH`` (default: the system temp folder) and does not
    remove them (``vllm.utils.network_utils.get_open_zmq_ipc_path``). Runs get the same through their temp folder
    (``runner.run_env``).
    """
    path = Path(tempfile.mkdtemp(prefix="prl-vllm-ipc-"))
    before = os.environ.get("VLLM_RPC_BASE_PATH")
    os.environ["VLLM_RPC_BASE_PATH"] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("VLLM_RPC_BASE_PATH", None)
        else:
            os.environ["VLLM_RPC_BASE_PATH"] = before
        shutil.rmtree(path, ignore_errors=True)
