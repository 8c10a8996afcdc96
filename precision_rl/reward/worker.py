"""Grader worker process: reads (module, function, args, seconds) requests on stdin, answers on stdout.

Started by ``precision_rl.reward.timeout.WorkerPool``; each check runs under the interval timer of this
process's main thread, so a slow check is interrupted here and the worker stays alive.
"""

from __future__ import annotations

import importlib
import sys

from precision_rl.reward.equivalence import warm_up
from precision_rl.reward.timeout import _recv, _run_with_signal, _send


def main() -> int:
    """Serve requests until stdin closes; return 0."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything a check prints must not corrupt the reply stream
    warm_up()  # imports happen before "ready", outside any time limit
    _send(stdout, "ready")
    while True:
        try:
            module, name, args, seconds = _recv(stdin)
        except EOFError:
            return 0
        try:
            fn = getattr(importlib.import_module(module), name)
            ok, value = _run_with_signal(fn, args, seconds)
            _send(stdout, ("ok" if ok else "timeout", value))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who re-raises it
            _send(stdout, ("error", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    sys.exit(main())
