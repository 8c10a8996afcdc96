"""Run logs → one tidy long table (``run, scale, experiment, algorithm, precision_train, precision_infer, seed,
step, metric, value``) plus one row per run.

Sources: run directories (``precision_rl.launch.runs``: ``manifest.json`` + verl file-logger jsonl per
attempt) and wandb CSV exports of runs made elsewhere. Rules:

- ``null`` (NaN/inf in verl's file logger) is kept as NaN: a logged non-finite value (e.g. the grad norm of an
  fp16 step the loss scaler skipped) is information.
- Attempts merge in order; on a repeated (step, metric) the later attempt (and, within a file, the later line)
  wins. Merging per metric rather than per step keeps a resumed attempt's step-k validation line from erasing
  step k's training metrics.
- A truncated last line (a run killed mid-write) is skipped with a warning; a malformed line anywhere else is a
  UserError naming the file and line.
- Metric names outside the known families, and non-numeric values, draw one warning per load and never stop it.
- Two run directories with the same identity (scale, run name) keep the newer one, with a warning naming both.
- Each run carries its configuration (``runs.configuration_key``): checks compare only runs of one configuration.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from precision_rl.analysis.records import UNKNOWN, LogWarning, RunInfo, RunMetrics, RunTable
from precision_rl.config.precision import PRECISIONS, ROLLOUT_FORMATS
from precision_rl.config.scale import PAPER
from precision_rl.errors import UserError
from precision_rl.fileio import atomic_path
from precision_rl.launch import runs
from precision_rl.metrics import is_known
from precision_rl.paths import ANALYSIS_DIR, MISMATCH_DIR, runs_root

try:  # orjson is ~5x faster than json; verl's own file logger writes with it
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson comes with verl's dependencies
    _loads = json.loads

COLUMNS = ("run", "scale", "experiment", "algorithm", "precision_train", "precision_infer", "seed", "step",
           "metric", "value")
RUN_COLUMNS = ("run", "scale", "experiment", "algorithm", "precision_train", "precision_infer", "seed", "status",
               "wall_time_s", "source", "config", "numerics", "profile")
METRICS_FILE = "metrics.parquet"
METRICS_CSV = "metrics.csv"
RUNS_CSV = "runs.csv"
_RUN_NAME_RE = re.compile(r"^(?P<exp>[A-Za-z0-9_.]+)-(?P<arm>fp16|bf16|fp32|train_[a-z0-9]+-infer_[a-z0-9]+)"
                          r"-s(?P<seed>\d+)$")


# --------------------------------------------------------------------------------------------- jsonl files

def read_metrics_file(path: Path, into: RunMetrics) -> int:
    """Append the (step, metric, value) triples of one verl file-logger jsonl to ``into``; return lines read."""
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    read = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = _loads(line)
            step, data = record["step"], record["data"]
            if isinstance(step, bool) or not isinstance(step, int) or not isinstance(data, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            if not any(rest.strip() for rest in lines[i + 1:]):
                warnings.warn(f"{path}: line {i + 1} is truncated (the run stopped mid-write); skipped it",
                              LogWarning, stacklevel=2)
                break
            raise UserError(f"{path}: line {i + 1} is not a metrics record "
                            f'{{"step": N, "data": {{...}}}}: {line[:80].decode(errors="replace")!r}') from None
        into.steps.extend([step] * len(data))
        into.names.extend(data.keys())
        into.values.extend(data.values())
        read += 1
    return read




def _manifest_info(run_dir: Path) -> RunInfo:
    try:
        doc = runs.read_manifest(run_dir)
    except FileNotFoundError:
        raise UserError(f"{run_dir} is not a run directory: it has no {runs.MANIFEST}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{run_dir / runs.MANIFEST}: not valid JSON ({exc})") from None
    try:
        prec = doc["precision"]
        seed = doc["seed"]
        info = RunInfo(run=str(doc["run_name"]), scale=str(doc["scale"]), experiment=str(doc["experiment"]),
                       algorithm=str(doc.get("algorithm") or UNKNOWN), precision_train=str(prec["train"]),
                       precision_infer=str(prec["infer"]), seed=int(seed), status=runs.effective_status(doc),
                       wall_time_s=attempts_seconds(doc.get("attempts") or []), source=str(run_dir),
                       created=str(doc.get("created") or run_dir.name), config=runs.configuration_key(doc),
                       numerics=runs.numerics_key(doc), profile=runs.profile_name(doc))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{run_dir / runs.MANIFEST}: missing or bad field {exc} (needs run_name, experiment, scale, "
                        "precision {train, infer}, seed)") from None
    for value, known in ((info.precision_train, PRECISIONS), (info.precision_infer, ROLLOUT_FORMATS)):
        if value not in known:
            raise UserError(f"{run_dir / runs.MANIFEST}: unknown precision {value!r} (choose {', '.join(known)})")
    return info


def stamp_seconds(stamp: str) -> float | None:
    """Return the POSIX time of a manifest stamp (``20261128T051044Z``, UTC), or None for anything else."""
    from datetime import datetime, timezone

    try:
        return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def attempts_seconds(attempts: list[dict]) -> float | None:
    """Return the summed wall time of the attempts that recorded a start and an end, or None."""
    total, seen = 0.0, False
    for attempt in attempts:
        start, end = stamp_seconds(attempt.get("started")), stamp_seconds(attempt.get("ended"))
        if start is not None and end is not None:
            total, seen = total + max(0.0, end - start), True
    return total if seen else None


def load_run_dir(run_dir: Path) -> RunMetrics:
    """Return the metrics of one run directory, every attempt merged in order."""
    run_dir = Path(run_dir)
    out = RunMetrics(_manifest_info(run_dir))
    for path in runs.attempt_files(run_dir):
        read_metrics_file(path, out)
    return out


def find_run_dirs(root: Path) -> list[Path]:
    """Return every run directory (a folder holding ``manifest.json``) under ``root``, sorted; the offline
    mismatch tool's results (``<root>/mismatch/``, read by ``mismatch_results``) and the local analysis outputs
    (``<root>/_analysis/``) are not training runs."""
    root = Path(root)
    return sorted(p.parent for p in root.rglob(runs.MANIFEST)
                  if not {MISMATCH_DIR, ANALYSIS_DIR} & set(p.relative_to(root).parts[:1]))


def default_run_dirs() -> list[Path]:
    """Return the run directories under the runs root (the local runs; none where it is absent)."""
    return run_dirs_under(runs_root())


def run_dirs_under(root: Path) -> list[Path]:
    """Return the run directories under ``root`` (none where it is absent)."""
    return find_run_dirs(root) if Path(root).is_dir() else []


def load_committed_tables(root: Path) -> list[RunTable]:
    """Return the runs under the committed root ``root``, one table per numerics (``runs.numerics_key``): a root may
    hold a run of one name once per CPU kind (the 2-step reference pair of each kind in ``results/reference/``), and a
    single table would keep only the newest of them. Empty where ``root`` holds no run."""
    groups: dict[str, list[Path]] = {}
    for run_dir in run_dirs_under(root):
        groups.setdefault(runs.numerics_key(runs.read_manifest(run_dir)), []).append(run_dir)
    return [load_runs(group, progress=False) for _, group in sorted(groups.items())]


def stale_table_reason(results: Path, root: Path) -> str | None:
    """Return why the table collected in ``results`` no longer describes the runs under ``root`` (a run added,
    gone, or written to after the table), or None when it does."""
    table_path = Path(results) / METRICS_FILE
    run_dirs = run_dirs_under(root)
    collected = {str(Path(source).resolve()) for source in read_table(results).runs["source"].dropna()}
    present = {str(run_dir.resolve()) for run_dir in run_dirs}
    if collected != present:
        return f"{len(present - collected)} run(s) added and {len(collected - present)} gone since it was collected"
    collected_at = table_path.stat().st_mtime
    newer = [run_dir for run_dir in run_dirs
             if any(path.stat().st_mtime > collected_at for path in [run_dir / runs.MANIFEST, *runs.attempt_files(run_dir)])]
    return f"{len(newer)} run(s) written to since it was collected" if newer else None


# --------------------------------------------------------------------------------------------- the table

def _to_floats(values: list, names: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Return the values as float64 (None → NaN) and a keep-mask when some values were not numbers."""
    try:
        return np.asarray(values, dtype=np.float64), None
    except (TypeError, ValueError):
        pass
    out = np.empty(len(values), dtype=np.float64)
    keep = np.ones(len(values), dtype=bool)
    for i, value in enumerate(values):
        if value is None:
            out[i] = np.nan
        elif isinstance(value, (int, float)):
            out[i] = value
        else:
            keep[i] = False
    return out, keep


def _per_run_column(per_run: list, run_idx: np.ndarray) -> pd.Categorical:
    uniq, inverse = np.unique(np.asarray(per_run, dtype=object).astype(str), return_inverse=True)
    return pd.Categorical.from_codes(inverse[run_idx], categories=list(uniq))


def _dedupe_runs(loaded: list[RunMetrics]) -> list[RunMetrics]:
    """Return the runs with one per (scale, run name): the newest directory wins, with a warning."""
    chosen: dict[tuple[str, str], RunMetrics] = {}
    for item in loaded:
        key = (item.info.scale, item.info.run)
        if key in chosen and chosen[key].info.created == item.info.created:
            continue  # the same run twice: a published copy (results/logs) beside its run directory
        if key in chosen:
            old = chosen[key]
            newer, older = (item, old) if item.info.created >= old.info.created else (old, item)
            warnings.warn(f"run {key[1]} ({key[0]} scale) appears twice: keeping {newer.info.source}, "
                          f"ignoring {older.info.source}", LogWarning, stacklevel=3)
            chosen[key] = newer
        else:
            chosen[key] = item
    return list(chosen.values())


def build_table(loaded: list[RunMetrics]) -> RunTable:
    """Return the tidy table of ``loaded`` runs (metric-level dedupe: later entries win), sorted."""
    loaded = _dedupe_runs(loaded)
    infos = [r.info for r in loaded]
    runs_df = pd.DataFrame([{c: getattr(i, c) for c in RUN_COLUMNS} for i in infos], columns=list(RUN_COLUMNS))
    runs_df["seed"] = runs_df["seed"].astype("int64")
    runs_df["wall_time_s"] = runs_df["wall_time_s"].astype("float64")
    lengths = np.array([len(r.values) for r in loaded], dtype=np.int64)
    if lengths.sum() == 0:
        return RunTable(empty_metrics(), runs_df)
    run_idx = np.repeat(np.arange(len(loaded)), lengths)
    names = [n for r in loaded for n in r.names]
    values, keep = _to_floats([v for r in loaded for v in r.values], names)
    values[~np.isfinite(values)] = np.nan  # NaN and ±inf alike mean "not a finite number", as verl's null
    if keep is not None:
        dropped = sorted({names[i] for i in np.flatnonzero(~keep)})
        warnings.warn(f"non-numeric values skipped in metrics {', '.join(dropped[:5])}"
                      f"{' ...' if len(dropped) > 5 else ''}", LogWarning, stacklevel=2)
    steps = np.fromiter((s for r in loaded for s in r.steps), dtype=np.int64, count=len(names))
    metric = pd.Categorical(names)
    unknown = sorted(c for c in metric.categories if not is_known(c))
    if unknown:
        warnings.warn(f"{len(unknown)} metric name(s) outside the known families, kept as they are: "
                      f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}", LogWarning, stacklevel=2)
    frame = pd.DataFrame({"_run": run_idx, "step": steps, "_metric": metric.codes, "value": values})
    dup = frame.duplicated(["_run", "step", "_metric"], keep="last").to_numpy()
    if keep is not None:
        dup |= ~keep
    if dup.any():
        frame = frame.loc[~dup]
    idx = frame["_run"].to_numpy()
    columns = {
        "run": _per_run_column([i.run for i in infos], idx),
        "scale": _per_run_column([i.scale for i in infos], idx),
        "experiment": _per_run_column([i.experiment for i in infos], idx),
        "algorithm": _per_run_column([i.algorithm for i in infos], idx),
        "precision_train": _per_run_column([i.precision_train for i in infos], idx),
        "precision_infer": _per_run_column([i.precision_infer for i in infos], idx),
        "seed": np.asarray([i.seed for i in infos], dtype=np.int64)[idx],
        "step": frame["step"].to_numpy(),
        "metric": pd.Categorical.from_codes(frame["_metric"].to_numpy(), categories=metric.categories),
        "value": frame["value"].to_numpy(),
    }
    table = pd.DataFrame(columns)
    table = table.sort_values(["scale", "run", "metric", "step"], kind="stable", ignore_index=True)
    return RunTable(table, runs_df)


def empty_metrics() -> pd.DataFrame:
    """Return a tidy table with no rows and the right columns and dtypes."""
    cat = pd.Categorical([])
    return pd.DataFrame({"run": cat, "scale": cat, "experiment": cat, "algorithm": cat, "precision_train": cat,
                         "precision_infer": cat, "seed": np.array([], dtype=np.int64),
                         "step": np.array([], dtype=np.int64), "metric": cat, "value": np.array([], dtype=np.float64)})


def load_runs(paths: list[Path] | None = None, wandb_scale: str = PAPER, progress: bool | None = None,
              **wandb_options) -> RunTable:
    """Return the tidy table of every run under ``paths`` (default: the runs root and the published logs).

    A path may be a run directory, a folder of run directories (searched recursively) or a wandb ``.csv``
    export (read at ``wandb_scale``; ``wandb_options`` name a run that does not follow our naming).
    """
    sources: list[Path | tuple[str, Path]] = []
    if paths is None:
        sources = default_run_dirs()
    else:
        for path in map(Path, paths):
            if path.is_file() and path.suffix.lower() == ".csv":
                sources.append(("csv", path))
            elif (path / runs.MANIFEST).is_file():
                sources.append(path)
            elif path.is_dir():
                found = find_run_dirs(path)
                if not found:
                    raise UserError(f"no run directories (folders with {runs.MANIFEST}) under {path}")
                sources += found
            else:
                raise UserError(f"no such run directory or wandb CSV file: {path}")
    from precision_rl.analysis.wandb_csv import read_wandb_csv

    loaded: list[RunMetrics] = []
    for source in tqdm(sources, desc="reading runs", unit="run", disable=True if progress is False else None):
        if isinstance(source, tuple):
            loaded += read_wandb_csv(source[1], wandb_scale, **wandb_options)
        else:
            loaded.append(load_run_dir(source))
    return build_table(loaded)


def save_table(table: RunTable, out_dir: Path, csv_too: bool = True) -> list[Path]:
    """Write the table as ``metrics.parquet`` (+ ``metrics.csv``) and ``runs.csv`` atomically; return the paths."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    written = []
    arrow = pa.Table.from_pandas(table.metrics, preserve_index=False)
    with atomic_path(out_dir / METRICS_FILE) as tmp:
        pq.write_table(arrow, tmp)
    written.append(out_dir / METRICS_FILE)
    if csv_too:
        plain = pa.table({name: (col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col)
                          for name, col in zip(arrow.column_names, arrow.columns, strict=True)})
        with atomic_path(out_dir / METRICS_CSV) as tmp:
            pa_csv.write_csv(plain, tmp)
        written.append(out_dir / METRICS_CSV)
    with atomic_path(out_dir / RUNS_CSV) as tmp:
        table.runs.to_csv(tmp, index=False)
    written.append(out_dir / RUNS_CSV)
    return written


def read_table(out_dir: Path) -> RunTable:
    """Return the table saved by ``save_table`` in ``out_dir``; a missing table is a UserError."""
    out_dir = Path(out_dir)
    path = out_dir / METRICS_FILE
    if not path.is_file():
        raise UserError(f"no metrics table at {path}: collect it first with `make collect`")
    metrics = pd.read_parquet(path)
    for col in ("run", "scale", "experiment", "algorithm", "precision_train", "precision_infer", "metric"):
        if not isinstance(metrics[col].dtype, pd.CategoricalDtype):
            metrics[col] = metrics[col].astype("category")
    runs_path = out_dir / RUNS_CSV
    runs_df = (pd.read_csv(runs_path, dtype={"run": str, "status": str, "source": str, "config": str,
                                                   "numerics": str, "profile": str})
               if runs_path.is_file() and runs_path.stat().st_size else pd.DataFrame(columns=list(RUN_COLUMNS)))
    for column in ("config", "numerics", "profile"):  # a table collected before runs carried them
        if column not in runs_df:
            runs_df[column] = UNKNOWN
    return RunTable(metrics, runs_df)
