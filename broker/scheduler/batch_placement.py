"""Batched level-1 placement over one snapshot: many jobs per pass, each decision assumed into it.

Owns `BatchPlacer` (Kueue's scheduling cycle over its snapshot, in level-1 terms), the job `shape` (what
of a request level 1 reads; two jobs of one shape get the same verdicts from the same summaries). The fleet
fingerprint that decides when a parked never-fit job is worth another look is broker.capacity.fingerprint.
Pure.

Within a pass capacity only shrinks (each placement is assumed into the snapshot), so a cluster's
verdict for a shape stays valid until that cluster's summary changes: `place` evaluates a cluster for a
shape once and reuses it; `update(summary)` (an assumption, a refresh) drops only that cluster's cached
verdicts. A decision over cached verdicts is a pick over at most N scores, not N filter chains.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, NoFit, Placement, Tier
from broker.scheduler import placement
from broker.scheduler.framework import PLACEMENT_FIELDS, PreparedJob

__all__ = ["BatchPlacer", "shape"]


def shape(job: JobRequest) -> Hashable:
    """The part of a request level 1 reads (framework.PLACEMENT_FIELDS): two jobs of one shape get the
    same verdicts from the same summaries."""
    return tuple(getattr(job, f) for f in PLACEMENT_FIELDS)


@dataclass
class _ShapeCache:
    """One shape's verdicts over the snapshot: valid verdicts by cluster, the clusters to evaluate
    again, and the feasible ones in two heaps (on-prem, cloud) keyed like placement's tie-break,
    (-score, cluster), with lazy deletion by evaluation epoch."""

    prepared: PreparedJob
    verdicts: dict[str, placement.ClusterVerdict] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)
    epochs: dict[str, int] = field(default_factory=dict)
    onprem: list[tuple[int, str, int]] = field(default_factory=list)
    cloud: list[tuple[int, str, int]] = field(default_factory=list)
    decision: Placement | NoFit | None = None

    def top(self, heap: list[tuple[int, str, int]]) -> placement.ClusterVerdict | None:
        while heap:
            _, cluster, epoch = heap[0]
            if self.epochs.get(cluster) == epoch and cluster not in self.dirty:
                return self.verdicts[cluster]
            heapq.heappop(heap)
        return None


class BatchPlacer:
    """Places jobs one after another over a snapshot of placeable summaries (observed minus reserved).

    The caller assumes each placement it commits by handing the cluster's new placeable summary to
    `update`; `evaluations` counts cluster evaluations (what the cache saves)."""

    def __init__(
        self,
        summaries: Iterable[ClusterSummary],
        traits: Mapping[str, ClusterTraits],
        policy: placement.PlacementPolicy,
        now: float,
    ) -> None:
        self._summaries = {s.cluster: s for s in sorted(summaries, key=lambda s: s.cluster)}
        self._traits = traits
        self._policy = policy
        self._now = now
        self._shapes: dict[Hashable, _ShapeCache] = {}
        self.evaluations = 0

    @property
    def summaries(self) -> list[ClusterSummary]:
        return list(self._summaries.values())

    def summary(self, cluster: str) -> ClusterSummary | None:
        return self._summaries.get(cluster)

    def place(self, job: JobRequest) -> Placement | NoFit:
        """The decision `placement.place` would take for `job` over the current snapshot."""
        key = shape(job)
        cache = self._shapes.get(key)
        if cache is None:
            cache = _ShapeCache(placement.prepare(job, self._policy), dirty=set(self._summaries))
            self._shapes[key] = cache
        if cache.decision is not None:
            return cache.decision
        for name in sorted(cache.dirty):
            self._evaluate(cache, name)
        cache.dirty.clear()
        best_onprem = cache.top(cache.onprem)
        best_cloud = cache.top(cache.cloud)
        chosen: placement.ClusterVerdict | None
        if best_onprem is not None and (self._policy.prefer_onprem or best_cloud is None):
            chosen = best_onprem
        elif best_onprem is None:
            chosen = best_cloud
        else:
            assert best_cloud is not None
            chosen = min(best_onprem, best_cloud, key=lambda v: (-v.score, v.cluster))
        if chosen is None:
            verdicts = [cache.verdicts[c] for c in self._summaries if c in cache.verdicts]
            cache.decision = placement.decide(cache.prepared, verdicts, self._policy)
        else:
            cache.decision = placement.decide(cache.prepared, [chosen], self._policy)
        return cache.decision

    def verdicts(self, job: JobRequest) -> list[placement.ClusterVerdict]:
        """The verdicts behind the last decision for the job's shape, by cluster (for traces)."""
        cache = self._shapes.get(shape(job))
        if cache is None:
            return []
        return [cache.verdicts[c] for c in self._summaries if c in cache.verdicts]

    def _evaluate(self, cache: _ShapeCache, name: str) -> None:
        summary = self._summaries.get(name)
        epoch = cache.epochs.get(name, 0) + 1
        cache.epochs[name] = epoch
        if summary is None:
            cache.verdicts.pop(name, None)
            return
        verdict = placement.evaluate(cache.prepared, summary, self._traits.get(name), self._policy, self._now)
        self.evaluations += 1
        cache.verdicts[name] = verdict
        if verdict.feasible:
            heap = cache.cloud if verdict.tier is Tier.CLOUD else cache.onprem
            heapq.heappush(heap, (-verdict.score, name, epoch))

    def update(self, summary: ClusterSummary) -> None:
        """A cluster's placeable summary changed: later decisions see it; other clusters' verdicts stay."""
        self._summaries[summary.cluster] = summary
        for cache in self._shapes.values():
            cache.dirty.add(summary.cluster)
            cache.decision = None
