"""Dispatchers: where the member-cluster half of a placement (create the Job, check for a racing cancel)
runs once the placement is committed in the store.

    InlineDispatcher      runs it at once on the caller's thread (tests, tools, one-shot runs)
    ConcurrentDispatcher  a bounded pool of threads per member cluster: creates run concurrently across
                          clusters, at most `per_cluster` at a time on one cluster, so a slow or hung
                          cluster delays only its own jobs and never the scheduling pass

Owns only the threads: what a task does (and its error handling) is the service's. A task that raises
is logged, never propagated: the job it was for is recovered by the service's own rules (dispatch
backoff, the workload-lost grace, the sweep).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from broker.core.errors import Fenced

log = logging.getLogger(__name__)

__all__ = ["ConcurrentDispatcher", "Dispatcher", "InlineDispatcher"]


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


class ConcurrentDispatcher:
    def __init__(self, per_cluster: int = 4) -> None:
        if per_cluster < 1:
            raise ValueError(f"per_cluster: must be >= 1 (got {per_cluster})")
        self._per_cluster = per_cluster
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._closed = False
        self._keyed: set[tuple[str, str]] = set()

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def submit(self, cluster: str, task: Callable[[], object]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the dispatcher is closed")
            pool = self._pools.get(cluster)
            if pool is None:
                pool = ThreadPoolExecutor(self._per_cluster, thread_name_prefix=f"gpufed-dispatch-{cluster}")
                self._pools[cluster] = pool
            self._in_flight += 1
        pool.submit(self._wrapped, task)

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
            self.submit(cluster, keyed)
        except RuntimeError:
            with self._lock:
                self._keyed.discard((cluster, key))
            raise
        return True

    def _wrapped(self, task: Callable[[], object]) -> None:
        try:
            _run(task)
        finally:
            with self._lock:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=False)
