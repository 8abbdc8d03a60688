"""The published fleet snapshot the API's views read: one model of what is placeable.

FleetSnapshot      frozen: when it was taken, the observed summaries, the placeable ones (observed plus
                   a cloud pool's scale-up headroom, minus live reservations: broker.cache.fleet_cache, the
                   model the scheduler places on; fenced clusters are not offered, as the scheduler
                   does not offer them) and the fences.
SnapshotPublisher  owns a FleetCache over the StateStore. `current()` asks the store only for the
                   (summary version, reservation ledger) pairs and the fences, reads again just the
                   clusters that moved, and publishes a new snapshot when anything changed; otherwise
                   the same snapshot object is handed out again (views memoize on it).

Safe from several threads (the API's sync routes run on a pool): one refresh at a time, readers of a
published snapshot never see it change. Service layer: the StateStore port only, `now` from the Clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from broker.cache.fleet_cache import FleetCache
from broker.core.model import ClusterSummary
from broker.core.ports import Clock, StateStore

__all__ = ["FleetSnapshot", "SnapshotPublisher"]


@dataclass(frozen=True)
class FleetSnapshot:
    at: float
    generation: int  # bumps with every published change
    observed: tuple[ClusterSummary, ...]  # sorted by cluster
    placeable: tuple[ClusterSummary, ...]  # declared, not fenced, sorted by cluster
    fenced: Mapping[str, str] = field(default_factory=dict)  # cluster -> why

    def observed_by_cluster(self) -> dict[str, ClusterSummary]:
        return {s.cluster: s for s in self.observed}


class SnapshotPublisher:
    def __init__(
        self,
        store: StateStore,
        clock: Clock,
        clusters: Callable[[], Iterable[str]],
        grow: Callable[[ClusterSummary], ClusterSummary] | None = None,
    ) -> None:
        """`clusters`: the declared clusters now (they change on a config reload); `grow`: a cloud
        pool's scale-up headroom (the burst gate's, as the scheduler's cache applies it)."""
        self._store = store
        self._clock = clock
        self._clusters = clusters
        self._cache = FleetCache(store, clusters(), grow=grow)
        self._lock = threading.Lock()
        self._published: FleetSnapshot | None = None
        self._seen: tuple[int, tuple[tuple[str, str], ...], float] | None = None

    def current(self) -> FleetSnapshot:
        """The fleet as it is in the store now, as a snapshot (the same object while nothing moved and
        no reservation expired)."""
        with self._lock:
            now = self._clock.now()
            self._cache.set_clusters(self._clusters())
            self._cache.refresh()
            fenced = self._store.fenced()
            placeable = tuple(s for s in self._cache.placeable_all(now) if s.cluster not in fenced)
            expiry = min(
                (
                    r.expires_at
                    for c in self._cache.clusters
                    if (st := self._cache.state(c))
                    for r in st.reservations
                    if r.expires_at > now
                ),
                default=float("inf"),
            )
            seen = (self._cache.generation, tuple(sorted(fenced.items())), expiry)
            published = self._published
            if published is None or seen != self._seen:
                generation = 0 if published is None else published.generation + 1
                observed = tuple(sorted(self._cache.observed(), key=lambda s: s.cluster))
                published = FleetSnapshot(now, generation, observed, placeable, dict(fenced))
                self._published, self._seen = published, seen
            return published
