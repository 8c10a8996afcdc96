"""Slow checks are cut at the time limit (counted as "not equal") in the main thread and in worker processes;
no worker process outlives its pool or the process that used it."""

import os
import subprocess
import sys
import threading
import time

import psutil

from precision_rl.paths import REPO_ROOT
from precision_rl.reward.timeout import WorkerPool, run_with_timeout


def test_main_thread_timer_interrupts_a_slow_call():
    start = time.monotonic()
    assert run_with_timeout(time.sleep, (5.0,), 0.2) == (False, None)
    assert time.monotonic() - start < 2.0
    assert run_with_timeout(abs, (-3,), 1.0) == (True, 3)


def test_worker_interrupts_a_slow_call_and_stays_usable():
    assert run_with_timeout(time.sleep, (5.0,), 0.3, force_worker=True) == (False, None)
    assert run_with_timeout(abs, (-4,), 5.0, force_worker=True) == (True, 4)


def test_other_threads_use_workers():
    out = {}

    def call():
        out["slow"] = run_with_timeout(time.sleep, (5.0,), 0.3)
        out["fast"] = run_with_timeout(abs, (-5,), 5.0)

    t = threading.Thread(target=call)
    t.start()
    t.join(120)
    assert out == {"slow": (False, None), "fast": (True, 5)}


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_close_leaves_no_worker_process():
    pool = WorkerPool(size=2)
    threads = [threading.Thread(target=pool.run, args=(time.sleep, (0.2,), 5.0)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    pids = [w.proc.pid for w in pool._idle]
    assert len(pids) == 2 and _alive(pids) == pids
    pool.close()
    assert _alive(pids) == []


_GRADE_FROM_A_THREAD_AND_EXIT = """
import threading, psutil
from precision_rl.reward.timeout import run_with_timeout
t = threading.Thread(target=run_with_timeout, args=(abs, (-1,), 60.0))
t.start(); t.join()
print(" ".join(str(c.pid) for c in psutil.Process().children(recursive=True)))
"""


def test_workers_end_with_the_process_that_used_them():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))))
    out = subprocess.run([sys.executable, "-c", _GRADE_FROM_A_THREAD_AND_EXIT], capture_output=True, text=True,
                         env=env, cwd=str(REPO_ROOT), timeout=180, check=True).stdout
    pids = [int(p) for p in out.split()]
    assert pids
    deadline = time.monotonic() + 10.0
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(pids) == []
