"""The controller's work queue: what changed since the last pass, and the signal that wakes the loop.

Owns a thread-safe set of dirty job ids (a Job's status changed in its cluster: the informer's change
callback) and a wake flag (a job written by another replica, a dispatch that finished). Like
controller-runtime's workqueue, a key added many times before a pass takes it is handled once. The
loop waits on `wait(timeout)`: it returns at once when something was added, else after `timeout` (the
earliest timer: a loss deadline, the idle tick). Pure threading: no I/O, no clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class WorkQueue:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: set[str] = set()
        self._woken = False
        self.adds = 0  # keys added (for tests and metrics)

    def add_jobs(self, job_ids: Iterable[str]) -> None:
        """Mark jobs dirty (their status is read again by the next pass) and wake the loop."""
        with self._cond:
            before = len(self._jobs)
            self._jobs.update(job_ids)
            self.adds += len(self._jobs) - before
            self._woken = True
            self._cond.notify_all()

    def add_job(self, job_id: str) -> None:
        self.add_jobs((job_id,))

    def requeue(self, job_ids: Iterable[str]) -> None:
        """Put jobs back for a later pass without waking the loop (their cluster's worker is busy)."""
        with self._cond:
            self._jobs.update(job_ids)

    def wake(self) -> None:
        """Something changed that is not a job's status (a submit, a cancel): run a pass now."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def take_jobs(self) -> set[str]:
        """The dirty job ids, emptied."""
        with self._cond:
            taken, self._jobs = self._jobs, set()
            return taken

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)

    def wait(self, timeout: float) -> bool:
        """Block until woken or `timeout` seconds passed; True when woken (the flag is cleared)."""
        with self._cond:
            if not self._woken and timeout > 0:
                self._cond.wait(timeout)
            woken, self._woken = self._woken, False
            return woken
