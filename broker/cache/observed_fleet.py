"""The declared clusters' observed summaries alone (no reservations), read again only when one moved.

ObservedFleet  `current()` asks the store for the clusters' marks (one round trip, no summaries) and
               reads the summaries again only when a declared cluster's summary version moved, joined or
               left; otherwise it hands out the same tuple. Heartbeats alone move no version and are not
               followed: this view is for what a cluster could hold, not whether it is alive.

Why apart from the published FleetSnapshot (broker.cache.fleet_snapshot): the snapshot is the placeable
model, and keeping it fresh reads every live reservation of every cluster whose ledger moved. During a
burst of submits every ledger moves between two reads, so the snapshot re-reads and parses thousands of
reservations. The never-fit warning at submit (broker.intake.submit_warnings) needs only what each cluster
could hold empty, and read through the snapshot it made that cost once a second on the API's event loop
(a worker thread still holds the GIL while it parses). Safe from several threads (one read at a time).
Service layer: the StateStore port only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from broker.core.model import ClusterSummary
from broker.core.ports import StateStore

__all__ = ["ObservedFleet"]


class ObservedFleet:
    def __init__(self, store: StateStore, clusters: Callable[[], Iterable[str]]) -> None:
        """`clusters`: the declared clusters now (they change on a config reload)."""
        self._store = store
        self._clusters = clusters
        self._lock = threading.Lock()
        self._versions: dict[str, int] | None = None  # cluster -> the version of the summary held
        self._summaries: tuple[ClusterSummary, ...] = ()
        self.reads = 0  # full reads of the summaries (what the marks save)

    def current(self) -> tuple[ClusterSummary, ...]:
        """The declared clusters' observed summaries, sorted by cluster."""
        with self._lock:
            declared = sorted(set(self._clusters()))
            marks = self._store.cluster_marks(declared)
            versions = {c: m.version for c, m in marks.items()}
            if versions != self._versions:
                self.reads += 1
                wanted = set(declared)
                read = sorted(
                    (s for s in self._store.observed_summaries() if s.cluster in wanted),
                    key=lambda s: s.cluster,
                )
                self._summaries = tuple(read)
                # the versions read, not the marks: a summary written between the two is read again next time
                self._versions = {s.cluster: s.version for s in read}
            return self._summaries
