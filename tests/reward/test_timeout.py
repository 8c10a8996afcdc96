"""Slow checks are cut at the time limit (counted as "not equal") in the main thread and in worker processes."""

import threading
import time

from precision_rl.reward.timeout import run_with_timeout


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
