"""One poller shard's liveness probes and its own lag: a scheduler instead of a prober thread per cluster.

Owns:
    LagMeter        how late this process's threads run: a ticker thread waits TICK seconds and keeps how
                    much longer it took; lag() is the largest of the last `window` seconds. A poller starved
                    of CPU (a busy host, or its interpreter lock shared by a thousand informer threads) would
                    read every member as slow: ClusterWatcher.probe_once subtracts the lag from a probe's
                    latency, so health judges the member's answer time, not the poller's own backlog, and
                    a probe that timed out while the lag was >= STARVED_LAG_SECONDS is not counted (in
                    doubt, the member is not blamed; a member that does not answer at all has no success
                    either and is lost after clusterLostSeconds as before).
    ProbeScheduler  every cluster's liveness probe (ClusterWatcher.probe_once) on its own schedule: every
                    `interval` after a success, every `retry` after a failure, the first ones spread over
                    one interval; run by a pool that grows only as far as probes are in flight at once
                    (a hung member holds one worker for its deadline, the others keep their schedule).
                    At 1,000 clusters that is one scheduler thread and a handful of workers per shard
                    instead of 1,000 prober threads waking every 2 s.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from broker.health.machine import Outcome

log = logging.getLogger(__name__)

TICK_SECONDS = 0.1
LAG_WINDOW_SECONDS = 5.0
MIN_WAIT_SECONDS = 0.05
# A shard this late on its own ticks is starved: a probe that timed out then is not held against the member.
STARVED_LAG_SECONDS = 1.0


class LagMeter:
    """How late this process's threads wake up (seconds), over a sliding window."""

    def __init__(
        self,
        tick: float = TICK_SECONDS,
        window: float = LAG_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tick = tick
        self.window = window
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def note(self, at: float, late: float) -> None:
        """One sample: at `at` (clock seconds) a wait ended `late` seconds after it was due."""
        with self._lock:
            self._samples.append((at, max(0.0, late)))
            self._trim(at)

    def _trim(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.window:
            self._samples.popleft()

    def lag(self) -> float:
        """The largest lateness seen in the last `window` seconds (0.0 when none, or not started)."""
        with self._lock:
            self._trim(self._clock())
            return max((late for _, late in self._samples), default=0.0)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufed-lag-meter", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            started = self._clock()
            if self._stop.wait(self.tick):
                return
            now = self._clock()
            self.note(now, now - started - self.tick)


class Probed(Protocol):
    """What the scheduler probes (adapters.cluster_watcher.ClusterWatcher)."""

    cluster: str

    def probe_once(self, lag: Callable[[], float] | None = None) -> Outcome: ...


@dataclass(eq=False)
class _Entry:
    target: Probed
    interval: float
    retry: float


class ProbeScheduler:
    """The liveness probes of many clusters: one scheduling thread, a pool that runs the due probes."""

    def __init__(
        self,
        *,
        lag: Callable[[], float] | None = None,
        max_workers: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`lag` (LagMeter.lag) is handed to every probe; `max_workers` bounds the probes in flight."""
        self._lag = lag
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Entry]] = []
        self._entries: dict[str, _Entry] = {}
        self._seq = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="gpufed-probe")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.probes = 0

    def add(self, target: Probed, interval: float, retry: float) -> None:
        """Probe `target` every `interval` seconds (every `retry` after a failure), the first time at a
        random point of the first interval. Adding a cluster again replaces its schedule."""
        entry = _Entry(target, interval, min(interval, retry))
        with self._cond:
            self._entries[target.cluster] = entry
            self._push(self._clock() + random.uniform(0.0, interval), entry)

    def remove(self, target: Probed) -> None:
        """No more probes of this target (one already running finishes, and is not rescheduled)."""
        with self._cond:
            if (
                self._entries.get(target.cluster) is not None
                and self._entries[target.cluster].target is target
            ):
                del self._entries[target.cluster]

    def scheduled(self) -> list[str]:
        with self._cond:
            return sorted(self._entries)

    def _push(self, due: float, entry: _Entry) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), entry))
        self._cond.notify()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufed-probe-scheduler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        with self._cond:
            while not self._stop.is_set():
                if not self._heap:
                    self._cond.wait(1.0)
                    continue
                due, _, entry = self._heap[0]
                now = self._clock()
                if due > now:
                    self._cond.wait(due - now)
                    continue
                heapq.heappop(self._heap)
                if self._entries.get(entry.target.cluster) is not entry:
                    continue  # removed (or re-added with a schedule of its own) meanwhile
                try:
                    self._pool.submit(self._probe, entry)
                except RuntimeError:
                    return  # the pool was shut down: stopping

    def _probe(self, entry: _Entry) -> None:
        started = self._clock()
        try:
            ok = entry.target.probe_once(self._lag).ok
        except Exception:  # probe_once classifies its own failures; this is a bug, keep probing
            log.exception("cluster %s: the liveness probe failed", entry.target.cluster)
            ok = False
        wait = entry.interval if ok else entry.retry
        with self._cond:
            self.probes += 1
            if not self._stop.is_set() and self._entries.get(entry.target.cluster) is entry:
                self._push(max(started + wait, self._clock() + MIN_WAIT_SECONDS), entry)
