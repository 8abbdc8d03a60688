"""One poller shard's liveness probes and its own lag, as tasks on the watch loop (adapters.watch_loop).

Owns:
    LagMeter        how late the watch loop runs: a ticker task waits TICK seconds and keeps how much longer
                    it took; lag() is the largest of the last `window` seconds. A poller starved of CPU (a
                    busy host, a loop with a thousand members' events to read) would read every member as
                    slow: ClusterWatcher.probe subtracts the lag from a probe's latency, so health judges the
                    member's answer time, not the poller's own backlog, and a probe that timed out while the
                    lag was >= STARVED_LAG_SECONDS is not counted (in doubt, the member is not blamed; a
                    member that does not answer at all has no success either and is lost after
                    clusterLostSeconds as before).
    ProbeScheduler  every cluster's liveness probe (ClusterWatcher.probe, GET /version) on its own schedule:
                    every `interval` after a success or a timeout (a timeout has already waited its
                    deadline; timeouts in a row back off, until the member answers any other call), every
                    `retry` after any other failure (in doubt, look again soon), the first ones spread
                    over one interval. One task per cluster on the loop: no thread per probe
                    (a pool of probe threads grew to 256 per shard at 1,000 members and starved the loop).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from adapters.watch_loop import WatchLoop, shared_loop
from broker.health.machine import Outcome

log = logging.getLogger(__name__)

TICK_SECONDS = 0.1
LAG_WINDOW_SECONDS = 5.0
MIN_WAIT_SECONDS = 0.05
# A shard this late on its own ticks is starved: a probe that timed out then is not held against the member.
STARVED_LAG_SECONDS = 1.0
# The longest wait between probes of a member whose probes time out, in probe intervals (8 s at 2 s).
TIMEOUT_BACKOFF_MAX = 4.0


class LagMeter:
    """How late the watch loop wakes up (seconds), over a sliding window."""

    def __init__(
        self,
        tick: float = TICK_SECONDS,
        window: float = LAG_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        loop: WatchLoop | None = None,
    ) -> None:
        self.tick = tick
        self.window = window
        self._clock = clock
        self._loop = loop
        self._samples: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = False

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
        if not self._started:
            self._started = True
            loop = self._loop or shared_loop()
            loop.submit(self._run(loop))

    def stop(self) -> None:
        self._stop.set()

    async def _run(self, loop: WatchLoop) -> None:
        task = asyncio.current_task()
        assert task is not None
        loop.cancel_on(self._stop, task)
        while True:
            started = self._clock()
            await asyncio.sleep(self.tick)
            now = self._clock()
            self.note(now, now - started - self.tick)


class Probed(Protocol):
    """What the scheduler probes (adapters.cluster_watcher.ClusterWatcher)."""

    cluster: str

    @property
    def last_success(self) -> float:
        """Epoch seconds of the member's last successful call of any kind (0: none)."""
        ...

    async def probe(self, lag: Callable[[], float] | None = None) -> Outcome: ...


class ProbeScheduler:
    """The liveness probes of many clusters: one task each on the watch loop."""

    def __init__(
        self,
        *,
        lag: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        loop: WatchLoop | None = None,
    ) -> None:
        """`lag` (LagMeter.lag) is handed to every probe."""
        self._lag = lag
        self._clock = clock
        self._loop = loop
        self._lock = threading.Lock()
        self._tasks: dict[str, tuple[Probed, Any]] = {}  # cluster -> (target, its task's future)
        self._stopped = False
        self.probes = 0

    def add(self, target: Probed, interval: float, retry: float) -> None:
        """Probe `target` every `interval` seconds (every `retry` after a failure that was not a timeout),
        the first time at a random point of the first interval. Adding a cluster again replaces it."""
        loop = self._loop or shared_loop()
        self._loop = loop
        with self._lock:
            if self._stopped:
                return
            old = self._tasks.pop(target.cluster, None)
            future = loop.submit(self._probe_loop(target, interval, min(interval, retry)))
            self._tasks[target.cluster] = (target, future)
        if old is not None:
            old[1].cancel()

    def remove(self, target: Probed) -> None:
        """No more probes of this target (one already running is cancelled)."""
        with self._lock:
            entry = self._tasks.get(target.cluster)
            if entry is None or entry[0] is not target:
                return
            del self._tasks[target.cluster]
        entry[1].cancel()

    def scheduled(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            tasks, self._tasks = list(self._tasks.values()), {}
        for _, future in tasks:
            future.cancel()

    async def _probe_loop(self, target: Probed, interval: float, retry: float) -> None:
        await asyncio.sleep(random.uniform(0.0, interval))  # spread the clusters over one interval
        timeouts = 0  # in a row
        while True:
            started = self._clock()
            try:
                outcome = await target.probe(self._lag)
                ok, timed_out = outcome.ok, outcome.cause.startswith("timeout")
            except Exception:  # probe classifies its own failures; this is a bug, keep probing
                log.exception("cluster %s: the liveness probe failed", target.cluster)
                ok, timed_out = False, False
            self.probes += 1
            timeouts = timeouts + 1 if timed_out else 0
            wait = probe_wait(interval, retry, ok, timeouts)
            if wait <= interval:
                await asyncio.sleep(max(MIN_WAIT_SECONDS, started + wait - self._clock()))
                continue
            # Backing off after timeouts: look every interval whether the member answered another call
            # (a list, a watch) meanwhile; then it is back, and so is the probe's cadence (a hang that
            # ended must not leave the member unprobed for up to TIMEOUT_BACKOFF_MAX intervals, blind to
            # the next fault).
            answered = target.last_success
            until = started + wait
            while (left := until - self._clock()) > 0:
                await asyncio.sleep(max(MIN_WAIT_SECONDS, min(interval, left)))
                if target.last_success > answered:
                    timeouts = 0
                    break


def probe_wait(interval: float, retry: float, ok: bool, timeouts: int) -> float:
    """Seconds from one probe's start to the next: `interval` after a success; after `timeouts` timeouts
    in a row, interval x 2^(timeouts-1) up to TIMEOUT_BACKOFF_MAX x interval (each timed-out probe has
    waited its deadline and cost the member a connection it may still be handshaking: a thousand members
    that time out together must not come back every two seconds, each with a new connection); `retry`
    after any other failure (a refusal costs nothing: in doubt, look again soon)."""
    if ok:
        return interval
    if timeouts:
        return interval * min(2.0 ** (timeouts - 1), TIMEOUT_BACKOFF_MAX)
    return retry
