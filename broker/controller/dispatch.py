"""Dispatchers: where the member-cluster half of a placement (create the Job, check for a racing cancel)
runs once the placement is committed in the store.

    InlineDispatcher      runs it at once on the caller's thread (tests, tools, one-shot runs)
    ConcurrentDispatcher  worker threads per member cluster: creates run concurrently across clusters,
                          at most `per_cluster` at a time on one cluster, so a slow or hung cluster
                          delays only its own jobs and never the scheduling pass; a cluster's workers
                          start with its work and end after `idle_seconds` without any; at most
                          `in_flight` plain tasks (creates, deletes) run at once across all clusters
                          (IN_FLIGHT: a burst onto 1,000 members is not 2,000 requests at once); keyed
                          ones (a cluster's status sync or sweep, one at a time each) take no slot, so
                          members that hang while holding every slot hold up no sync

Owns only the threads: what a task does (and its error handling) is the service's. A task that raises
is logged, never propagated: the job it was for is recovered by the service's own rules (dispatch
backoff, the workload-lost grace, the sweep).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from broker.core.errors import Fenced

log = logging.getLogger(__name__)

__all__ = ["IN_FLIGHT", "ConcurrentDispatcher", "Dispatcher", "InlineDispatcher"]

# Plain tasks (creates, deletes) running at once across every member cluster when no other bound is
# given (`gpufed serve` passes settings.dispatchInFlight, whose default is the same). A burst of 2,000 jobs onto 1,000 members started
# as many creates at once: as many threads contending for the GIL with the control loop, and as many
# requests (each a TLS set-up on a cold connection) on the members. 64 creates in flight still make
# thousands a second when the members answer in tens of milliseconds.
IN_FLIGHT = 64


class Dispatcher(Protocol):
    def submit(self, cluster: str, task: Callable[[], object]) -> None: ...

    def submit_once(self, cluster: str, key: str, task: Callable[[], object]) -> bool:
        """Run `task` unless the task `key` of this cluster is still running (a sync or sweep of a slow
        cluster is never queued twice). Returns whether it was submitted."""
        ...

    def wait_idle(self, timeout: float) -> bool:
        """Whether every submitted task finished within `timeout` seconds."""
        ...

    def close(self) -> None: ...


def _run(task: Callable[[], object]) -> None:
    try:
        task()
    except Fenced as e:  # this replica lost the lease mid-task: the new leader's passes take the job over
        log.warning("a dispatch task stopped: this replica is no longer the leader (%s)", e)
    except Exception:
        log.exception("a dispatch task failed; its job is recovered by the next passes")


class InlineDispatcher:
    def submit(self, cluster: str, task: Callable[[], object]) -> None:
        _run(task)

    def submit_once(self, cluster: str, key: str, task: Callable[[], object]) -> bool:
        _run(task)
        return True

    def wait_idle(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        return None


@dataclass
class _Lane:
    """One member cluster's tasks and the workers taking them (all guarded by the dispatcher's lock)."""

    work: threading.Condition  # a task came, or the dispatcher closed
    tasks: deque[Callable[[], object]] = field(default_factory=deque)
    workers: int = 0  # live worker threads
    waiting: int = 0  # of those, how many wait for a task


class ConcurrentDispatcher:
    """Per member cluster: a queue of tasks and at most `per_cluster` worker threads, started when work
    comes and ended after `idle_seconds` without any, so a fleet of 1,000 quiet members holds no
    dispatch thread (a ThreadPoolExecutor per cluster kept its threads for ever: 1,000 idle threads)."""

    def __init__(self, per_cluster: int = 4, idle_seconds: float = 10.0, in_flight: int = IN_FLIGHT) -> None:
        if per_cluster < 1:
            raise ValueError(f"per_cluster: must be >= 1 (got {per_cluster})")
        if in_flight < 1:
            raise ValueError(f"in_flight: must be >= 1 (got {in_flight})")
        self._per_cluster = per_cluster
        self._running = threading.BoundedSemaphore(in_flight)  # a slot per plain task running
        self._idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._lanes: dict[str, _Lane] = {}
        self._threads: set[threading.Thread] = set()
        self._in_flight = 0
        self._closed = False
        self._keyed: set[tuple[str, str]] = set()

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def threads(self) -> int:
        """Worker threads alive now (all clusters)."""
        with self._lock:
            return sum(lane.workers for lane in self._lanes.values())

    def submit(self, cluster: str, task: Callable[[], object]) -> None:
        self._enqueue(cluster, functools.partial(self._in_slot, task))

    def _in_slot(self, task: Callable[[], object]) -> None:
        with self._running:
            task()

    def _enqueue(self, cluster: str, task: Callable[[], object]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the dispatcher is closed")
            lane = self._lanes.get(cluster)
            if lane is None:
                lane = self._lanes[cluster] = _Lane(threading.Condition(self._lock))
            lane.tasks.append(task)
            self._in_flight += 1
            if lane.waiting:
                lane.work.notify()
            if len(lane.tasks) <= lane.waiting or lane.workers >= self._per_cluster:
                return  # a waiting worker takes it, or it queues behind the busy ones
            lane.workers += 1
            worker = threading.Thread(
                target=self._work_on, args=(cluster, lane), name=f"gpufed-dispatch-{cluster}", daemon=True
            )
            self._threads.add(worker)
        worker.start()

    def submit_once(self, cluster: str, key: str, task: Callable[[], object]) -> bool:
        with self._lock:
            if (cluster, key) in self._keyed:
                return False
            self._keyed.add((cluster, key))

        def keyed() -> None:
            try:
                task()
            finally:
                with self._lock:
                    self._keyed.discard((cluster, key))

        try:
            self._enqueue(cluster, keyed)
        except RuntimeError:
            with self._lock:
                self._keyed.discard((cluster, key))
            raise
        return True

    def _work_on(self, cluster: str, lane: _Lane) -> None:
        """One worker of `cluster`: its tasks in order, until none came for idle_seconds (or closed)."""
        try:
            while True:
                with self._lock:
                    if not lane.tasks and not self._closed:
                        lane.waiting += 1
                        lane.work.wait_for(lambda: bool(lane.tasks) or self._closed, self._idle_seconds)
                        lane.waiting -= 1
                    if not lane.tasks:
                        lane.workers -= 1
                        if not lane.workers and self._lanes.get(cluster) is lane:
                            del self._lanes[cluster]
                        return
                    task = lane.tasks.popleft()
                try:
                    _run(task)
                finally:
                    with self._lock:
                        self._in_flight -= 1
                        if self._in_flight == 0:
                            self._idle.notify_all()
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self) -> None:
        """No new tasks; the queued ones still run (as a pool's shutdown without cancel); returns when
        every worker has ended."""
        with self._lock:
            self._closed = True
            for lane in self._lanes.values():
                lane.work.notify_all()
            threads = list(self._threads)
        for worker in threads:
            worker.join()
