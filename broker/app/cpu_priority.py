"""The broker process's CPU priority beside its API processes (settings.controllerNice).

Owns lowering the scheduling priority (raising the niceness) of every thread of this process but the
ones named, on Linux. Niceness is per thread there: a thread starts with its creator's, and a child
process with that of the thread that started it. So the API processes are started first, from a thread
that keeps the niceness `gpufed serve` started with (broker.app.api_workers' spawner), and every other
thread is lowered after; the threads the controller starts later (dispatch workers, informers) inherit
the lower niceness from the threads that start them.

Why: with apiProcesses >= 1 the API's processes and the controller's share the machine's cores. When the
cores are short (a burst of submits while the controller places and creates the Jobs of the burst before
it), the kernel then gives the API processes the CPU first: submits and reads are answered at the API's
pace, and placement catches up once the burst has been taken (the jobs wait QUEUED, which is what the
queue is for). An idle or lightly loaded machine sees no difference: niceness only orders who runs when
there are more runnable threads than cores.

Raising the niceness never needs a privilege, lowering it back does: once lowered, a thread stays so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["lower_threads", "thread_niceness"]

_TASKS = Path("/proc/self/task")


def lower_threads(niceness: int, keep: Collection[int] = ()) -> int:
    """Set every thread of this process whose native id is not in `keep` to at least `niceness` (a
    thread already nicer stays as it is). Returns how many threads were lowered; 0 where the platform
    has no per-thread niceness (no /proc/self/task), which is logged once."""
    if niceness <= 0:
        return 0
    if not _TASKS.is_dir():
        log.warning("controllerNice %d: this platform has no per-thread niceness; ignored", niceness)
        return 0
    lowered = 0
    for entry in _TASKS.iterdir():
        tid = int(entry.name)
        if tid in keep:
            continue
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
                lowered += 1
        except (ProcessLookupError, PermissionError):
            continue  # a thread that ended meanwhile
    return lowered


def thread_niceness(pid: int) -> dict[int, int]:
    """Each thread's niceness of process `pid` (Linux), by native thread id."""
    out: dict[int, int] = {}
    for entry in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(entry.name)] = os.getpriority(os.PRIO_PROCESS, int(entry.name))
        except ProcessLookupError:
            continue
    return out
