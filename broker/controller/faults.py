"""Fault injection for the crash tests: a broker that SIGKILLs itself at a named step.

GPUFED_CRASH_AT=<step>[:<n>] makes the process kill itself (SIGKILL: no cleanup, no atexit, exactly
as the kernel's OOM killer or `kill -9` would) the n-th time (default 1st) it reaches <step>. The
steps are the points between two writes of a job's life in broker.controller.service:

    submitted    the job is in the store, the HTTP answer not yet sent
    reserved     the reservation is held, the job not yet PLACED
    placed       PLACED is recorded, the Job not yet created
    created      the Job exists in the member cluster, the cancel check after it not yet done
    observed     sync read the Job and decided a transition, not yet written
    cancelled    CANCELLED is recorded, the Job not yet deleted
    failed-over  a lost cluster's job had its reservation released, its new state not yet written

Unset (production), point() is one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading

STEPS = ("submitted", "reserved", "placed", "created", "observed", "cancelled", "failed-over")
ENV = "GPUFED_CRASH_AT"


def _parse(text: str) -> tuple[str, int] | None:
    if not text:
        return None
    step, _, nth = text.partition(":")
    if step not in STEPS:
        raise ValueError(f"{ENV}: unknown step {step!r}; known: {', '.join(STEPS)}")
    try:
        n = int(nth) if nth else 1
    except ValueError:
        raise ValueError(f"{ENV}: the count after ':' must be an integer (got {nth!r})") from None
    return step, max(1, n)


_target = _parse(os.environ.get(ENV, ""))
_seen: dict[str, int] = {}
_lock = threading.Lock()


def point(step: str) -> None:
    """A crash point: kill this process here if GPUFED_CRASH_AT names this step (and count)."""
    if _target is None or _target[0] != step:
        return
    with _lock:
        _seen[step] = _seen.get(step, 0) + 1
        if _seen[step] >= _target[1]:
            os.kill(os.getpid(), signal.SIGKILL)
