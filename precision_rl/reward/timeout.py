"""Run a grading check under a wall-clock limit; a check that runs out of time counts as "not equal".

In the main thread a POSIX interval timer interrupts the check in place (no process, no copy). In other threads
(verl calls the reward from a thread pool) the check goes to one of two long-lived worker processes, each a fresh
``python -m precision_rl.reward.worker``, which interrupts a slow check with the same timer and stays alive; only a
worker stuck in C code past the limit plus ``_Worker.MARGIN_S`` is killed, and replaced on the next call.

A maintained pool (pebble 5.2's ``ProcessPool`` with a per-task ``timeout``) measured worse here: with its Linux
default, fork, a worker forked while another thread was importing sympy waited forever on the import lock, and so did
the call (pebble's timeout starts only once a worker takes the task), while spawn and forkserver re-run the caller's
``__main__`` in every worker (in verl's Ray actor that is Ray's default_worker.py: ray imported, 82 MB per worker
instead of 59 MB). It also kills the worker at every timeout, so the call after two simultaneous timeouts waited
0.6-1.2 s instead of under 1 ms, and a call cost 0.3-0.5 ms instead of 0.04-0.2 ms (AMD EPYC, 2 cores).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from precision_rl.paths import REPO_ROOT


class CheckTimeout(BaseException):
    """Raised inside a check whose time ran out (a BaseException so library ``except Exception`` cannot eat it)."""


def _on_alarm(signum, frame):
    raise CheckTimeout()


def _can_use_signal() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0.0  # never clobber a timer someone else set


def _run_with_signal(fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[bool, Any]:
    old = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return True, fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except CheckTimeout:
        return False, None
    finally:
        signal.signal(signal.SIGALRM, old)


# --- worker processes ----------------------------------------------------------------------------------------------

def _send(stream, obj: Any) -> None:
    blob = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(blob)) + blob)
    stream.flush()


def _recv(stream) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("grader worker closed its pipe")
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))


class _Worker:
    """One child process running ``python -m precision_rl.reward.worker``; it times checks itself with the timer."""

    START_LIMIT_S = 120.0  # importing sympy and math-verify on a loaded 2-core machine
    MARGIN_S = 5.0  # the child interrupts a slow check itself; this is the net for a child stuck in C code

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, "-m", "precision_rl.reward.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=str(REPO_ROOT))
        if not select.select([self.proc.stdout], [], [], self.START_LIMIT_S)[0] or _recv(self.proc.stdout) != "ready":
            self.kill()
            raise RuntimeError("the grader worker process did not start")

    def call(self, fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[bool, Any]:
        _send(self.proc.stdin, (fn.__module__, fn.__qualname__, args, seconds))
        if not select.select([self.proc.stdout], [], [], seconds + self.MARGIN_S)[0]:
            raise TimeoutError
        status, value = _recv(self.proc.stdout)
        if status == "error":
            raise RuntimeError(value)
        return status == "ok", value

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class WorkerPool:
    """A few long-lived grading workers shared by all threads of this process."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self._idle: list[_Worker] = []
        self._started = 0
        self._cond = threading.Condition()

    def _take(self) -> _Worker:
        with self._cond:
            while not self._idle and self._started >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            return _Worker()
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise

    def _give(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is None:
                self._started -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def run(self, fn: Callable[..., Any], args: tuple, seconds: float) -> tuple[bool, Any]:
        """Return ``(True, fn(*args))`` computed in a worker, or ``(False, None)`` when it ran out of time."""
        worker = self._take()
        try:
            result = worker.call(fn, args, seconds)
        except TimeoutError:
            worker.kill()
            self._give(None)
            return False, None
        except (EOFError, OSError):
            worker.kill()
            self._give(None)
            raise
        except BaseException:
            self._give(worker)
            raise
        self._give(worker)
        return result

    def close(self) -> None:
        """Stop every idle worker."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for worker in idle:
            worker.kill()


_POOL = WorkerPool()


def run_with_timeout(fn: Callable[..., Any], args: tuple, seconds: float, force_worker: bool = False) -> tuple[bool, Any]:
    """Return ``(True, fn(*args))``, or ``(False, None)`` when the call took longer than ``seconds``.

    ``fn`` must be a module-level function (workers import it by name). Exceptions raised by ``fn`` propagate.
    """
    if not force_worker and _can_use_signal():
        return _run_with_signal(fn, args, seconds)
    return _POOL.run(fn, args, seconds)
