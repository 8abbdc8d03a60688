"""The placer's in-memory cache of the fleet (Kueue's cache -> snapshot), refreshed incrementally.

Owns, for the declared clusters, the last summary and reservations read from the StateStore with the
summary version and reservation ledger they were read at, and the placeable view of each
(broker.cache.reservations.deduct). `refresh` asks the store only for the (version, ledger) pairs and
the latest heartbeats, and reads again just the clusters whose pair moved (a heartbeat alone moves no
version); `assume` applies a reservation this placer just committed (compare-and-set at exactly the
cached pair), so the next decision needs no read at all, and adds it to the cluster's placeable view in
one step (reservations.deduct_held), not by deducting every reservation again; `hold` and
`settle` do the same for a pass's decisions reserved together (decided one after another, each held in
the cache, then one compare-and-set per cluster).
`generation` bumps whenever anything placeable may have changed; `fingerprint` digests the fleet's
structure (for parking never-fit jobs). Service layer: talks to the StateStore port only, `now` comes in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from broker.cache import reservations
from broker.capacity.fingerprint import fingerprint
from broker.core.model import ClusterSummary, Reservation
from broker.core.ports import ClusterState, StateStore

__all__ = ["FleetCache"]


@dataclass
class _Entry:
    state: ClusterState
    placeable: ClusterSummary | None = None
    placeable_until: float = 0.0  # the earliest expiry among its reservations: recompute after it


class FleetCache:
    def __init__(
        self,
        store: StateStore,
        clusters: Iterable[str],
        grow: Callable[[ClusterSummary], ClusterSummary] | None = None,
    ) -> None:
        """`grow`: what a cluster could add before it is placed on (broker.burst.scaleup: a cloud pool's
        scale-up headroom), applied to the observed summary before the reservations are deducted."""
        self._store = store
        self._grow = grow
        self._clusters: tuple[str, ...] = tuple(sorted(set(clusters)))
        self._entries: dict[str, _Entry] = {}
        self.generation = 0
        self.reads = 0  # clusters read in full (what the incremental refresh saves)
        self._fingerprint: str | None = None

    @property
    def clusters(self) -> tuple[str, ...]:
        return self._clusters

    def set_clusters(self, clusters: Iterable[str]) -> None:
        """The declared clusters changed (config reload, ClusterProfiles)."""
        wanted = tuple(sorted(set(clusters)))
        if wanted != self._clusters:
            self._clusters = wanted
            self._entries = {c: e for c, e in self._entries.items() if c in wanted}
            self._changed()

    def _changed(self) -> None:
        self.generation += 1
        self._fingerprint = None

    def refresh(self) -> list[str]:
        """Read again what moved in the store. Returns the clusters read. A summary that only had a
        heartbeat (its version unchanged) is not read: its heartbeat is taken from the marks."""
        marks = self._store.cluster_marks(self._clusters)
        gone = [c for c in self._entries if c not in marks]
        for c in gone:
            del self._entries[c]
        moved: list[str] = []
        beats = False
        for c, mark in marks.items():
            entry = self._entries.get(c)
            if entry is None or (entry.state.summary.version, entry.state.ledger) != (
                mark.version,
                mark.ledger,
            ):
                moved.append(c)
            elif mark.heartbeat is not None and mark.published_at is not None:
                summary = entry.state.summary
                if (summary.heartbeat, summary.published_at) != (mark.heartbeat, mark.published_at):
                    beat = replace(summary, heartbeat=mark.heartbeat, published_at=mark.published_at)
                    entry.state = replace(entry.state, summary=beat)
                    entry.placeable = None
                    beats = True
        if moved:
            self._read(moved)
        elif gone or beats:
            self._changed()  # a heartbeat may make a stale cluster placeable again
        return moved

    def refresh_cluster(self, cluster: str) -> None:
        """Read one cluster again (a reserve found it changed)."""
        self._read([cluster])
        if cluster not in self._entries:
            self._changed()

    def _read(self, clusters: Sequence[str]) -> None:
        states = self._store.cluster_states(clusters)
        self.reads += len(states)
        for c in clusters:
            state = states.get(c)
            if state is None:
                self._entries.pop(c, None)
            else:
                self._entries[c] = _Entry(state)
        self._changed()

    def state(self, cluster: str) -> ClusterState | None:
        entry = self._entries.get(cluster)
        return entry.state if entry is not None else None

    def placeable(self, cluster: str, now: float) -> ClusterSummary | None:
        """The cluster as the placer must see it at `now`: observed (plus scale-up headroom) minus live
        reservations."""
        entry = self._entries.get(cluster)
        if entry is None:
            return None
        if entry.placeable is None or now >= entry.placeable_until:
            held = reservations.live(entry.state.reservations, cluster, now)
            observed = entry.state.summary if self._grow is None else self._grow(entry.state.summary)
            entry.placeable = reservations.deduct(observed, held, now)
            entry.placeable_until = min((r.expires_at for r in held), default=float("inf"))
        return entry.placeable

    def placeable_all(self, now: float) -> list[ClusterSummary]:
        out = []
        for c in self._clusters:
            s = self.placeable(c, now)
            if s is not None:
                out.append(s)
        return out

    def observed(self) -> list[ClusterSummary]:
        return [self._entries[c].state.summary for c in self._clusters if c in self._entries]

    def assume(self, reservation: Reservation, ledger: int) -> None:
        """A reserve this placer committed at the cached (version, ledger): the store is now at `ledger`
        and holds the reservation; reflect both without reading."""
        entry = self._entries.get(reservation.cluster)
        if entry is None:
            return
        self._add(entry, reservation)
        entry.state = replace(entry.state, ledger=ledger)

    def hold(self, reservation: Reservation) -> None:
        """A reservation decided but not yet stored (a pass reserves its decisions together, one
        compare-and-set per cluster at the cached pair): the next decisions see it. `settle` keeps or
        drops it once the store answered; a `refresh_cluster` forgets it with the rest of the old state."""
        entry = self._entries.get(reservation.cluster)
        if entry is None:
            return
        self._add(entry, reservation)

    @staticmethod
    def _add(entry: _Entry, reservation: Reservation) -> None:
        """The reservation joins the entry's, replacing the job's other one there. The placeable view
        takes it in one step when it only adds (reservations.deduct_held composes); when it replaces
        one, the view is made again from all of them at the next look."""
        held = entry.state.reservations
        replaces = any(r.job_id == reservation.job_id for r in held)
        kept = tuple(r for r in held if r.job_id != reservation.job_id) if replaces else held
        entry.state = replace(entry.state, reservations=(*kept, reservation))
        if replaces or entry.placeable is None:
            entry.placeable = None
            return
        entry.placeable = reservations.deduct_held(entry.placeable, (reservation,))
        entry.placeable_until = min(entry.placeable_until, reservation.expires_at)

    def settle(self, cluster: str, refused: Iterable[str], ledger: int) -> None:
        """The store held this cluster's batch of holds and is now at `ledger`: reflect it without
        reading. When it `refused` some (another placer holds those jobs), the cluster is read again:
        each hold replaced the job's other reservation in this cache, and that one, which the store kept,
        must count again (dropping only the refused holds lost it, and the next decisions over-committed)."""
        entry = self._entries.get(cluster)
        if entry is None:
            return
        if set(refused):
            self.refresh_cluster(cluster)
            return
        entry.state = replace(entry.state, ledger=ledger)  # the same reservations: the same view

    def fingerprint(self) -> str:
        """The fleet's structure (broker.capacity.fingerprint), cached until something changes."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.observed())
        return self._fingerprint
