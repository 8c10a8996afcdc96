"""Other verl runs on this machine. A run beside another shares the cores (each runs slower, so neither's times are a
benchmark) and the memory: Ray's memory monitor kills workers when the node runs low (``ray.exceptions.
OutOfMemoryError``; ray 2.60). A launcher therefore says what runs beside it: a line when it starts, and in the
attempt's record what shared the machine and the least memory left.

A neighbour is another launcher (``python -m precision_rl run``) or a Ray daemon of another run (a raylet or GCS
server whose command line does not name this run's Ray folder: a test or a script driving verl in-process has one).
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

RAY_DAEMONS = ("raylet", "gcs_server")
LAUNCHER = ("precision_rl", "run")  # the module and subcommand of a launcher's command line
DESCRIBED_CHARS = 200  # of a launcher's command line, in a line naming it


def is_verl_run(cmdline: list[str]) -> bool:
    """Return whether a process with ``cmdline`` is a verl run: a launcher or one of Ray's daemons."""
    if not cmdline:
        return False
    if Path(cmdline[0]).name in RAY_DAEMONS:
        return True
    return any(tuple(cmdline[i:i + 2]) == LAUNCHER for i in range(len(cmdline) - 1))


def describe(pid: int, cmdline: list[str]) -> str:
    """Return a neighbour as a line names it: ``pid 123: Ray raylet`` or ``pid 123: precision_rl run <its args>``."""
    name = Path(cmdline[0]).name
    if name in RAY_DAEMONS:
        return f"pid {pid}: Ray {name}"
    start = next(i for i in range(len(cmdline) - 1) if tuple(cmdline[i:i + 2]) == LAUNCHER)
    text = " ".join(cmdline[start:])
    return f"pid {pid}: {text if len(text) <= DESCRIBED_CHARS else text[:DESCRIBED_CHARS - 3] + '...'}"


def own_pids() -> set[int]:
    """Return this process and its ancestors (the make or shell that started it), never neighbours of its run."""
    pids = {os.getpid()}
    try:
        pids |= {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        pass
    return pids


def find_neighbours(exclude: set[int], own_marker: str | None = None) -> dict[int, str]:
    """Return each verl run on this machine outside ``exclude`` (this run's processes and ``own_pids``) whose command
    line does not hold ``own_marker`` (this run's Ray folder), pid → ``describe``'s line, launchers first."""
    found = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
        except psutil.Error:
            continue
        if proc.pid in exclude or not is_verl_run(cmdline):
            continue
        if own_marker and own_marker in " ".join(cmdline):
            continue
        found[proc.pid] = describe(proc.pid, cmdline)
    return dict(sorted(found.items(), key=lambda item: (": Ray " in item[1], item[0])))


def available_gib() -> float:
    """Return the memory the kernel says is available for new work, in GiB (``MemAvailable``)."""
    return psutil.virtual_memory().available / 2**30


def shared_line(neighbours: list[str], available_gib: float | None, now: bool = False) -> str:
    """Return, in words, what shares the machine with a run (``now``: at its start) or shared it (during the attempt):
    the neighbours (the first three named) and the memory available then (the least seen, during an attempt)."""
    named = "; ".join(neighbours[:3]) + (f"; and {len(neighbours) - 3} more" if len(neighbours) > 3 else "")
    if available_gib is None:
        memory = ""
    else:
        memory = f"; {available_gib:.1f} GiB of memory available" if now else \
            f"; the least memory available was {available_gib:.1f} GiB"
    verb = "are running on" if now else "shared"
    return (f"{len(neighbours)} other verl process(es) {verb} this machine ({named}){memory}: runs side by side share "
            "the cores and the memory (Ray kills workers when the node runs low), so run one at a time")
