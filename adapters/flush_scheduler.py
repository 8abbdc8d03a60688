"""A poller shard's flushes: when each of its cluster watchers folds a batch of events into a summary and
publishes it, run on a timer thread and a few workers instead of a thread per watcher.

Owns when and where flushes run, not what they do (ClusterWatcher.flush_due). A watcher pokes the
scheduler when something arrives (an event, a list, a health change); its flush runs once,
`flush_interval` after the first poke, so a burst of events lands in one batch, as the watcher's own
thread did. A watcher's flushes never overlap: a poke during its flush schedules one more after it.
At 125 members a shard held 125 flusher threads; now a timer and `workers` threads (the flushes write
to Redis, so a few run at once).

FlushScheduler(workers)   `poke(watcher)` (any thread), `stop()`.
FlushSignal               the watcher's "something arrived" event: setting it pokes the scheduler (if any).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

log = logging.getLogger(__name__)

__all__ = ["FlushScheduler", "FlushSignal", "Flushable"]


class Flushable(Protocol):
    flush_interval: float

    def flush_due(self) -> None:
        """Fold what arrived into a summary and publish it (no-op when nothing did)."""
        ...


class FlushScheduler:
    def __init__(self, workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="gpufed-flush")
        self._cond = threading.Condition()
        self._due: dict[Flushable, float] = {}  # watcher -> monotonic time its flush runs
        self._running: set[Flushable] = set()
        self._again: set[Flushable] = set()  # poked while its flush ran
        self._stopped = False
        self._timer = threading.Thread(target=self._run, name="gpufed-flush-timer", daemon=True)
        self._timer.start()

    def poke(self, watcher: Flushable) -> None:
        """Something arrived at `watcher`: flush it `flush_interval` from now (unless one is due)."""
        with self._cond:
            if self._stopped or watcher in self._due:
                return
            if watcher in self._running:
                self._again.add(watcher)
                return
            self._due[watcher] = time.monotonic() + watcher.flush_interval
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._due and min(self._due.values()) <= now:
                        break
                    wait = min(self._due.values()) - now if self._due else None
                    self._cond.wait(wait)
                if self._stopped:
                    return
                ready = [w for w, at in self._due.items() if at <= now]
                for w in ready:
                    del self._due[w]
                    self._running.add(w)
            for w in ready:
                try:
                    self._pool.submit(self._flush, w)
                except RuntimeError:  # stopped meanwhile
                    return

    def _flush(self, watcher: Flushable) -> None:
        try:
            watcher.flush_due()
        except Exception:
            log.exception("a flush failed; the watcher's next event flushes again")
        finally:
            with self._cond:
                self._running.discard(watcher)
                if watcher in self._again and not self._stopped:
                    self._again.discard(watcher)
                    self._due[watcher] = time.monotonic() + watcher.flush_interval
                    self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._due.clear()
            self._cond.notify()
        self._timer.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)


class FlushSignal(threading.Event):
    """Set when something arrived for `watcher` to flush; with a FlushScheduler, setting it also
    schedules the flush there (without one, the watcher's own thread waits on it)."""

    def __init__(self, watcher: Flushable, scheduler: FlushScheduler | None) -> None:
        super().__init__()
        self._watcher = watcher
        self.scheduler = scheduler

    def set(self) -> None:
        super().set()
        if self.scheduler is not None:
            self.scheduler.poke(self._watcher)
