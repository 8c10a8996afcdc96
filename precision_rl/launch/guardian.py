"""The guardian of one run attempt: cleans up after a launcher that died without cleaning up (SIGKILL, OOM kill).

``supervise`` starts ``python -m precision_rl.launch.guardian`` in a session of its own with a pipe to its stdin,
sends it
one JSON line (what to watch and what to remove), and writes ``done`` when the launcher has cleaned up itself. While
the pipe is open the guardian follows verl's process tree; when the pipe closes without ``done`` the launcher is
gone, so the guardian kills the tree, removes the attempt's Ray folder and the shared-memory segments it created,
and records the attempt as ``killed`` in the manifest.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
from pathlib import Path

import psutil

from precision_rl.launch import runs
from precision_rl.launch.supervise import GUARDIAN_DONE, RAY_LOGS, ProcessTree, keep_ray_logs, remove_new_shm

POLL_S = 1.0
KILLED = "killed"
KILLED_REASON = "the launcher ended without cleaning up (e.g. SIGKILL); the guardian stopped verl and removed its leftovers"


def _clean_up(tree, doc: dict) -> None:
    killed = tree.kill_all()
    recorded = doc["run_dir"] is not None and (Path(doc["run_dir"]) / runs.MANIFEST).is_file()
    ray_logs = None
    if doc["ray_dir"]:
        if recorded:
            ray_logs = keep_ray_logs(Path(doc["ray_dir"]), Path(doc["run_dir"]) / RAY_LOGS.format(attempt=doc["attempt"]))
        shutil.rmtree(doc["ray_dir"], ignore_errors=True)
    removed = remove_new_shm(set(doc["shm_before"]))
    if recorded:
        runs.update_attempt(Path(doc["run_dir"]), doc["attempt"], status=KILLED, reason=KILLED_REASON,
                            ended=runs.utc_stamp(), cleanup={"processes": killed, "shm": removed},
                            **({"ray_logs": ray_logs.name} if ray_logs else {}))


def _read(fd: int, timeout: float) -> bytes | None:
    """Return the bytes available on ``fd`` within ``timeout`` (b"" at end of file), or None when nothing came."""
    if not select.select([fd], [], [], timeout)[0]:
        return None
    return os.read(fd, 1 << 16)


def main() -> int:
    """Watch the launcher through stdin until ``done`` (return 0) or its end (clean up, return 0)."""
    fd, received, tree, doc = sys.stdin.fileno(), b"", None, None
    while True:
        chunk = _read(fd, POLL_S)
        if chunk == b"":
            break
        received += chunk or b""
        if doc is None and b"\n" in received:
            head, received = received.split(b"\n", 1)
            doc = json.loads(head)
            try:
                tree = ProcessTree(psutil.Process(doc["verl_pid"]), doc["ray_dir"])
            except psutil.Error:
                return 0
        if doc is not None and GUARDIAN_DONE in received:
            return 0
        if tree is not None:
            tree.refresh()
    if doc is not None and tree is not None:
        _clean_up(tree, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
