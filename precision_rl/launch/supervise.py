"""Run one verl process to its end and leave nothing of it behind.

``supervise`` starts verl in a session of its own, copies its output into the run's ``train.log``, draws a progress
bar from the metrics file verl's FileLogger writes, stops the run when no new metrics line arrives for
``watchdog_s`` seconds, and on every ending (success, failure, watchdog, Ctrl-C or SIGTERM) removes what the run
left: its processes (Ray's included), its Ray temp folder and the shared-memory segments it created.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from precision_rl.launch import neighbours
from precision_rl.launch.runs import FINISHED

SHM_DIR = Path("/dev/shm")
POLL_S = 1.0
GUARDIAN_DONE = b"done"  # the line that tells the guardian the launcher cleaned up itself
MEMORY_POLL_S = 15.0  # reading every process's smaps costs ~1 s of CPU
STOP_GRACE_S = (20.0, 10.0)  # after SIGINT, then after SIGTERM, before SIGKILL
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX = re.compile(r"^\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\)\s*")
_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception|Interrupt)\b\s*:")
# How an error that only reports another one says so, in vLLM 0.32: its front end when an engine core process exits
# during start-up ("Engine core initialization failed. See root cause above.", vllm/v1/engine/utils.py,
# wait_for_engine_startup), and the engine core when one of its worker processes does ("WorkerProc initialization
# failed due to an exception in a background process. See stack trace for root cause.",
# vllm/v1/executor/multiproc_executor.py, WorkerProc.wait_for_ready). The traceback printed before the first of
# them holds the cause.
_POINTERS_TO_ROOT_CAUSE = ("root cause above", "See stack trace for root cause")
# Where an attempt that did not finish keeps Ray's session logs (every Ray worker's stdout and stderr, vLLM's engine
# processes included, and the raylet's record of a worker that died without a traceback, e.g. killed for memory).
RAY_LOGS = "ray-logs-attempt{attempt}.tar.gz"


def keep_ray_logs(ray_temp_dir: Path, dest: Path) -> Path | None:
    """Archive the logs of every Ray session under ``ray_temp_dir`` into ``dest`` (tar.gz, one folder per session);
    return ``dest``, or None where there are no logs or they cannot be written (the run's own outcome matters more)."""
    sessions = sorted(p for p in Path(ray_temp_dir).glob("ray/session_*/logs") if p.is_dir())
    if not sessions or dest.exists():
        return None
    try:
        with tarfile.open(dest, "w:gz") as tar:
            for logs in sessions:
                tar.add(logs, arcname=f"{logs.parent.name}/logs")
    except OSError:
        dest.unlink(missing_ok=True)
        return None
    return dest


@dataclass
class Outcome:
    """How a supervised run ended."""

    status: str  # finished | failed | interrupted
    exit_code: int | None
    reason: str | None = None
    peak_memory_gib: float | None = None
    steps_logged: int = 0
    leftovers_removed: dict = field(default_factory=dict)
    ray_logs: Path | None = None  # the archive of Ray's logs, kept where the attempt did not finish
    shared_with: list[str] = field(default_factory=list)  # other verl runs seen on the machine (neighbours.describe)
    lowest_available_gib: float | None = None  # the least memory available at the memory polls


@dataclass
class Progress:
    """Metric lines read so far from a growing jsonl file."""

    path: Path
    offset: int = 0
    lines: int = 0
    last_step: int | None = None
    last_data: dict = field(default_factory=dict)

    def poll(self) -> int:
        """Read the complete lines appended since the last call; return how many arrived."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return 0
        end = chunk.rfind(b"\n")
        if end < 0:
            return 0
        self.offset += end + 1
        count = 0
        for raw in chunk[: end + 1].splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            count += 1
            self.last_step, self.last_data = line.get("step"), line.get("data") or {}
        self.lines += count
        return count


def failing_line(lines) -> str | None:
    """Return the most telling line of a failed run's output: the last ``SomethingError: ...`` line, else the last
    non-empty one (ANSI colours and Ray's ``(Actor pid=N)`` prefixes removed). Where errors point to a root cause
    above them, the error line before the first of them comes first: ``<root cause> (then: <the first pointer>)``."""
    cleaned = [_RAY_PREFIX.sub("", _ANSI.sub("", line)).strip() for line in lines]
    cleaned = [line for line in cleaned if line]
    errors = [line for line in cleaned if _ERROR_LINE.search(line)]
    if not errors:
        return cleaned[-1] if cleaned else None
    pointer = next((i for i, line in enumerate(errors) if any(p in line for p in _POINTERS_TO_ROOT_CAUSE)), None)
    if pointer:
        return f"{errors[pointer - 1]} (then: {errors[pointer]})"
    return errors[-1]


def _shm_entries() -> set[str]:
    try:
        return {p.name for p in SHM_DIR.iterdir()}
    except OSError:
        return set()


def _held_shm_inodes() -> set[int]:
    """Return the inodes of the /dev/shm files some live process maps or holds open. Inodes, not names: glibc's
    ``sem_open`` creates a named semaphore under a temporary name, maps it, then links it to its own name, so the
    mapping shows the temporary name and only the inode ties it to ``sem.<name>`` (a neighbouring run's vLLM
    semaphore, still to be opened by its spawned child)."""
    prefix = str(SHM_DIR) + "/"
    inodes: set[int] = set()
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            lines = (proc_dir / "maps").read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(prefix):
                inodes.add(int(fields[4]))
        try:
            handles = list((proc_dir / "fd").iterdir())
        except OSError:
            continue
        for handle in handles:
            try:
                if os.readlink(handle).startswith(prefix):
                    inodes.add(handle.stat().st_ino)
            except OSError:
                continue
    return inodes


def orphaned_shm(before: set[str]) -> list[str]:
    """Return the /dev/shm entries created since ``before`` that no live process maps or holds open, sorted: what a
    finished run left behind (a live neighbour's entries are held)."""
    fresh = _shm_entries() - before
    if not fresh:
        return []
    held_inodes = _held_shm_inodes()
    orphans = []
    for name in sorted(fresh):
        try:
            if (SHM_DIR / name).stat().st_ino not in held_inodes:
                orphans.append(name)
        except OSError:
            pass
    return orphans


def remove_new_shm(before: set[str]) -> list[str]:
    """Remove the /dev/shm entries created since ``before`` that no live process holds (``orphaned_shm``); return
    their names."""
    removed = []
    for name in orphaned_shm(before):
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except OSError:
            pass
    return removed


class ProcessTree:
    """Every process the run started, remembered as (pid, create time) so a reused pid is never killed."""

    def __init__(self, root: psutil.Process, marker: str | None):
        self.root, self.marker, self.seen = root, marker, {}
        self.add(root)

    def add(self, proc: psutil.Process) -> None:
        try:
            self.seen[proc.pid] = proc.create_time()
        except psutil.Error:
            pass

    def refresh(self) -> list[psutil.Process]:
        """Record the root's current descendants and return the live members of the tree."""
        try:
            for child in self.root.children(recursive=True):
                self.add(child)
        except psutil.Error:
            pass
        return self.alive()

    def alive(self) -> list[psutil.Process]:
        """Return the live processes of the tree seen so far."""
        live = []
        for pid, created in list(self.seen.items()):
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created:
                    live.append(proc)
            except psutil.Error:
                continue
        return live

    def adopt_marked(self) -> None:
        """Add every process whose command line names the run's marker (its Ray folder): Ray's daemons may have
        left the tree by re-parenting."""
        if not self.marker:
            return
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if proc.pid not in self.seen and self.marker in " ".join(proc.info["cmdline"] or []):
                    self.add(proc)
            except psutil.Error:
                continue

    def memory_gib(self) -> float:
        """Return the summed proportional set size of the live tree in GiB."""
        total = 0
        for proc in self.alive():
            try:
                total += proc.memory_full_info().pss
            except (psutil.Error, AttributeError):
                continue
        return total / 2**30

    def kill_all(self) -> int:
        """SIGKILL every live member (marked ones included); return how many were killed."""
        self.adopt_marked()
        live = [p for p in self.alive() if p.pid != os.getpid()]
        _kill_and_reap(live)
        return len(live)


def _kill_and_reap(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _children() -> set[int]:
    try:
        return {child.pid for child in psutil.Process().children()}
    except psutil.Error:
        return set()


def _kill_unheld_children(before: set[int], held: set[int]) -> int:
    """SIGKILL (with their process groups) this process's children that were started after ``before`` was taken and
    are not in ``held``; return how many there were.

    These are children whose ``subprocess.Popen`` an interrupt cut short after the fork: Popen never returned, so
    no handle holds their pid.
    """
    try:
        strays = [child for child in psutil.Process().children() if child.pid not in before | held]
    except psutil.Error:
        return 0
    for child in strays:
        _signal_group(child.pid, signal.SIGKILL)
    _kill_and_reap(strays)
    return len(strays)


def _stop(proc: subprocess.Popen) -> None:
    for sig, grace in zip((signal.SIGINT, signal.SIGTERM), STOP_GRACE_S, strict=True):
        if proc.poll() is not None:
            return
        _signal_group(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def guardian_config_line(verl_pid: int, ray_dir: Path | None, shm_before: set[str], run_dir: Path | None,
                attempt: int | None) -> bytes:
    """Return the first line sent to the guardian (``launch/guardian.py``): what it watches and removes."""
    doc = {"verl_pid": verl_pid, "ray_dir": str(ray_dir) if ray_dir else None, "shm_before": sorted(shm_before),
           "run_dir": str(run_dir) if run_dir else None, "attempt": attempt}
    return json.dumps(doc).encode() + b"\n"


def _start_guardian(verl_pid: int, env: dict[str, str], cwd: Path, log, ray_temp_dir: Path | None,
                    shm_before: set[str], run_dir: Path | None, attempt: int | None) -> subprocess.Popen:
    """Start the run's guardian in a session of its own (a kill of this process group leaves it alive)."""
    guardian = subprocess.Popen([sys.executable, "-m", "precision_rl.launch.guardian"], stdin=subprocess.PIPE,
                                stdout=log, stderr=log, env=env, cwd=cwd, start_new_session=True)
    guardian.stdin.write(guardian_config_line(verl_pid, ray_temp_dir, shm_before, run_dir, attempt))
    guardian.stdin.flush()
    return guardian


def _release_guardian(guardian: subprocess.Popen) -> None:
    """Tell the guardian that this process cleaned up itself, and wait for it to leave."""
    try:
        guardian.stdin.write(GUARDIAN_DONE + b"\n")
        guardian.stdin.close()
    except OSError:
        pass
    try:
        guardian.wait(timeout=10)
    except subprocess.TimeoutExpired:
        guardian.kill()
        guardian.wait()


def _bar(total: int | None, desc: str):
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True, mininterval=0.5 if tty else 30,
                unit="step", bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]")


def start_bar_at(bar, step: int) -> None:
    """Restart ``bar``'s clock at ``step``, the first step this attempt logged, and return None: its rate and time
    left then count only this attempt's steps, not verl's start-up nor the steps of the attempts before a resume."""
    bar.initial = bar.n = max(0, step - 1)
    bar.start_t = bar.last_print_t = time.time()


def _postfix(data: dict, keys: dict[str, str]) -> str:
    parts = []
    for label, key in keys.items():
        value = data.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{label}={value:.3g}")
    return " ".join(parts)


def supervise(argv: list[str], env: dict[str, str], cwd: Path, log_path: Path, metrics_path: Path, *,
              total_steps: int | None, desc: str, watchdog_s: float | None, ray_temp_dir: Path | None,
              postfix_keys: dict[str, str] | None = None, run_dir: Path | None = None,
              attempt: int | None = None, on_finished: Callable[[], None] | None = None) -> Outcome:
    """Run ``argv`` until it ends, the watchdog fires, or the user interrupts; clean up; return the Outcome.

    A KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one by the CLI) stops the run, cleans up, and is re-raised
    after the outcome is recorded in the returned object's place: callers catch it and record "interrupted".
    A guardian process (``precision_rl.launch.guardian``) cleans up instead when this process dies without doing it, and
    then records attempt ``attempt`` of ``run_dir`` as killed. ``on_finished`` is called once a run that exited 0 of
    itself has been cleaned up, before ``ray_temp_dir`` is removed.
    """
    shm_before = _shm_entries()
    tail: collections.deque[str] = collections.deque(maxlen=200)
    log = open(log_path, "ab")
    log.write(("$ " + " ".join(argv) + "\n").encode())
    log.flush()
    progress = Progress(metrics_path)
    tree, guardian, reader, bar = None, None, None, None
    status, reason, interrupted = None, None, False
    proc: subprocess.Popen | None = None
    last_progress, last_memory, peak = time.monotonic(), 0.0, 0.0
    shared_with: dict[int, str] = {}
    lowest_available: float | None = None
    own = neighbours.own_pids()
    first_step: int | None = None
    children_before = _children()
    try:
        # Started inside the try: an interrupt that lands as soon as the child exists still stops it (one that lands
        # inside Popen after the fork, before it returns a handle, is caught by _kill_unheld_children).
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        tree = ProcessTree(psutil.Process(proc.pid), str(ray_temp_dir) if ray_temp_dir else None)
        guardian = _start_guardian(proc.pid, env, cwd, log, ray_temp_dir, shm_before, run_dir, attempt)

        def copy_output():
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                tail.append(raw.decode(errors="replace"))

        reader = threading.Thread(target=copy_output, daemon=True)
        reader.start()
        bar = _bar(total_steps, desc)
        bar.set_postfix_str("starting verl (Ray, engines, first validation)")
        while proc.poll() is None:
            time.sleep(POLL_S)
            tree.refresh()
            if progress.poll():
                last_progress = time.monotonic()
                if isinstance(progress.last_step, int):
                    if first_step is None:
                        first_step = progress.last_step
                        start_bar_at(bar, first_step)
                    bar.n = max(bar.n, progress.last_step)
                    bar.set_postfix_str(_postfix(progress.last_data, postfix_keys or {}), refresh=False)
                    bar.refresh()
            now = time.monotonic()
            if now - last_memory >= MEMORY_POLL_S:
                peak, last_memory = max(peak, tree.memory_gib()), now
                shared_with.update(neighbours.find_neighbours(own | set(tree.seen), tree.marker))
                available = neighbours.available_gib()
                lowest_available = available if lowest_available is None else min(lowest_available, available)
            if watchdog_s and now - last_progress > watchdog_s:
                status = "failed"
                reason = f"watchdog: no new metrics line in {metrics_path.name} for {watchdog_s:.0f} s"
                _stop(proc)
    except KeyboardInterrupt:
        interrupted = True
        status, reason = "interrupted", "interrupted by the user (Ctrl-C or SIGTERM)"
        if proc is not None:
            _stop(proc)
    finally:
        code = proc.wait() if proc is not None else None
        if reader is not None and reader.is_alive():  # an interrupt may land before it started
            reader.join(timeout=10)
        progress.poll()
        if bar is not None:
            bar.close()
        killed = tree.kill_all() if tree is not None else 0
        killed += _kill_unheld_children(children_before, {p.pid for p in (proc, guardian) if p is not None})
        ray_logs = None
        if on_finished is not None and status is None and code == 0:
            on_finished()
        if ray_temp_dir is not None:
            if run_dir is not None and (status is not None or code != 0):
                ray_logs = keep_ray_logs(ray_temp_dir, run_dir / RAY_LOGS.format(attempt=attempt or 0))
            shutil.rmtree(ray_temp_dir, ignore_errors=True)
        removed_shm = remove_new_shm(shm_before)
        if guardian is not None:
            _release_guardian(guardian)
        log.close()
    if status is None:
        status = FINISHED if code == 0 else "failed"
        if code != 0:
            reason = failing_line(tail) or f"verl exited with code {code}"
    outcome = Outcome(status, code, reason, round(peak, 2) if peak else None, progress.lines,
                      {"processes": killed, "shm": removed_shm}, ray_logs, list(shared_with.values()),
                      None if lowest_available is None else round(lowest_available, 2))
    if interrupted:
        raise InterruptedRun(outcome)
    return outcome


class InterruptedRun(KeyboardInterrupt):
    """A KeyboardInterrupt that carries the Outcome of the run it stopped."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.reason)
        self.outcome = outcome
