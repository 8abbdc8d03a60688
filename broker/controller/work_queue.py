"""The controller's work queue: what changed since the last pass, and the signal that wakes the loop.

Owns a thread-safe set of dirty job ids (a Job's status changed in its cluster: the informer's change
callback) and the wakes since the last pass, each naming what changed (Wake: a job, a cluster,
capacity; a pass that no wake started is a TIMER pass). Like controller-runtime's workqueue, a key
added many times before a pass takes it is handled once. The loop waits on `wait(timeout)`: it returns
at once when something was added, else after `timeout` (the earliest timer: a loss deadline, the idle
tick), and runs only the steps that care about what woke it (broker.controller.control_loop). A step
that finds a change itself (observe_clusters: a summary moved) `note`s it: the later steps of the same
pass that care run, without a wake of its own. Pure threading: no I/O, no clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from enum import StrEnum


class Wake(StrEnum):
    """What changed: which steps of the next pass run (each step declares the wakes it cares about)."""

    JOB = "job"  # a job's status in its cluster, or a record written by another writer (submit, cancel)
    CLUSTER = "cluster"  # a cluster's health or fence
    CAPACITY = "capacity"  # a cluster's summary moved (free GPUs may have changed)
    TIMER = "timer"  # nothing woke the loop: the idle tick or a deadline


ALL_WAKES = frozenset(Wake)


class WorkQueue:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: set[str] = set()
        self._wakes: set[Wake] = set()
        self._noted: set[Wake] = set()
        self.adds = 0  # keys added (for tests and metrics)

    def add_jobs(self, job_ids: Iterable[str]) -> None:
        """Mark jobs dirty (their status is read again by the next pass) and wake the loop."""
        with self._cond:
            before = len(self._jobs)
            self._jobs.update(job_ids)
            self.adds += len(self._jobs) - before
            self._wakes.add(Wake.JOB)
            self._cond.notify_all()

    def add_job(self, job_id: str) -> None:
        self.add_jobs((job_id,))

    def requeue(self, job_ids: Iterable[str]) -> None:
        """Put jobs back for a later pass without waking the loop (their cluster's worker is busy)."""
        with self._cond:
            self._jobs.update(job_ids)

    def wake(self, what: Wake = Wake.JOB) -> None:
        """Something changed (by default a job record: a submit, a cancel): run a pass now, with the
        steps that care about `what`."""
        with self._cond:
            self._wakes.add(what)
            self._cond.notify_all()

    def note(self, what: Wake) -> None:
        """A step of the pass under way found `what` changed: the later steps of this pass that care
        run (no new pass)."""
        with self._cond:
            self._noted.add(what)

    def take_noted(self) -> frozenset[Wake]:
        with self._cond:
            noted, self._noted = frozenset(self._noted), set()
            return noted

    def take_jobs(self) -> set[str]:
        """The dirty job ids, emptied."""
        with self._cond:
            taken, self._jobs = self._jobs, set()
            return taken

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)

    def wait(self, timeout: float) -> bool:
        """Block until woken or `timeout` seconds passed; True when woken (the wakes are cleared)."""
        return Wake.TIMER not in self.next_wakes(timeout)

    def next_wakes(self, timeout: float) -> frozenset[Wake]:
        """Block until woken or `timeout` seconds passed: what woke it (cleared), {TIMER} when nothing did."""
        with self._cond:
            if not self._wakes and timeout > 0:
                self._cond.wait(timeout)
            wakes, self._wakes = frozenset(self._wakes), set()
            return wakes or frozenset({Wake.TIMER})
