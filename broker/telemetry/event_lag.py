"""The event-to-Redis histogram, counted where it is observed and written in batches.

A poller shard observes one latency per summary write that carries new watch events (hundreds a second
under churn at 125 members). Counting each in Redis cost a round trip of a dozen HINCRBYs per write,
about a tenth of a busy shard's CPU (docs/benchmarks.md, "Freshness at 2,000 events/s"). The shard
counts here instead and adds the counts to Redis every few seconds
(adapters.redis_tables.SideTables.add_event_lags; adapters.poller_shard.EVENT_LAGS_INTERVAL_SECONDS).

    EventLagTally(bounds)      observe(cluster, seconds); drain() -> {cluster: LagCounts} since the last
                               drain; restore(counts) puts undelivered counts back (a failed write)
    LagCounts                  per bound, how many observations were <= it (cumulative, as Prometheus
                               buckets), and the count and sum of all of them
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LagCounts:
    """Observations of one cluster: le[i] counts those <= bounds[i]; count includes those above all."""

    le: tuple[int, ...]
    count: int
    seconds: float


class EventLagTally:
    """Counts per cluster since the last drain. Not thread-safe: its owner holds a lock around it."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError(f"histogram bounds must increase: {self.bounds}")
        self._hits: dict[
            str, list[int]
        ] = {}  # per cluster: observations falling in each bucket, not cumulative
        self._count: dict[str, int] = {}
        self._seconds: dict[str, float] = {}

    def observe(self, cluster: str, seconds: float) -> None:
        hits = self._hits.get(cluster)
        if hits is None:
            hits = self._hits[cluster] = [0] * len(self.bounds)
        i = bisect.bisect_left(self.bounds, seconds)  # the first bound >= seconds
        if i < len(hits):
            hits[i] += 1
        self._count[cluster] = self._count.get(cluster, 0) + 1
        self._seconds[cluster] = self._seconds.get(cluster, 0.0) + seconds

    def drain(self) -> dict[str, LagCounts]:
        out: dict[str, LagCounts] = {}
        for cluster, hits in self._hits.items():
            cumulative, running = [], 0
            for n in hits:
                running += n
                cumulative.append(running)
            out[cluster] = LagCounts(tuple(cumulative), self._count[cluster], self._seconds[cluster])
        self._hits, self._count, self._seconds = {}, {}, {}
        return out

    def restore(self, counts: Mapping[str, LagCounts]) -> None:
        """Put counts that could not be written back, to be written with the next drain."""
        for cluster, c in counts.items():
            hits = self._hits.setdefault(cluster, [0] * len(self.bounds))
            previous = 0
            for i, cumulative in enumerate(c.le):
                hits[i] += cumulative - previous
                previous = cumulative
            self._count[cluster] = self._count.get(cluster, 0) + c.count
            self._seconds[cluster] = self._seconds.get(cluster, 0.0) + c.seconds
