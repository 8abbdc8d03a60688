"""Batched level-1 placement over one snapshot: many jobs per pass, each decision assumed into it.

Owns `BatchPlacer` (Kueue's scheduling cycle over its snapshot, in level-1 terms), the job `shape` (what
of a request level 1 reads; two jobs of one shape get the same verdicts from the same summaries) and the
fleet `fingerprint` that decides when a parked never-fit job is worth another look. Pure.

Within a pass capacity only shrinks (each placement is assumed into the snapshot), so a cluster's
verdict for a shape stays valid until that cluster's summary changes: `place` evaluates a cluster for a
shape once and reuses it; `update(summary)` (an assumption, a refresh) drops only that cluster's cached
verdicts. A decision over cached verdicts is a pick over at most N scores, not N filter chains.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from broker import placement
from broker.model import ClusterSummary, ClusterTraits, JobRequest, NoFit, Placement

__all__ = ["BatchPlacer", "fingerprint", "shape"]


def shape(job: JobRequest) -> Hashable:
    """The part of a request level 1 reads (names, images, commands and labels are not)."""
    need = job.mig_need
    return (
        job.tenant,
        job.gpus_per_pod,
        job.pods,
        job.gpu_products,
        job.min_gpu_memory_mib,
        job.mig_profile,
        (need.memory_gb, need.compute_slices) if need is not None else None,
        job.mig_slices_per_pod,
        job.numa_aligned,
        job.cpu_millis_per_pod,
        job.memory_mib_per_pod,
        job.allow_burst,
        job.max_price_per_gpu_hour,
        job.priority_class,
        job.clusters,
    )


def _structure(s: ClusterSummary) -> tuple[object, ...]:
    """What of a summary decides whether a job can *ever* fit there (not how much is free now)."""
    return (
        s.cluster,
        str(s.tier),
        tuple(sorted((p.product, p.memory_mib, p.allocatable > 0 or p.nodes > 0) for p in s.products)),
        tuple(sorted((m.product, m.profile, m.resource_name) for m in s.mig)),
        tuple(sorted((q.cluster_queue, q.flavor, q.resource, q.nominal) for q in s.queues)),
        tuple(sorted(s.price_per_gpu_hour.items())),
    )


def fingerprint(summaries: Iterable[ClusterSummary]) -> str:
    """A digest of the fleet's structure: clusters, products, MIG profiles, Kueue quotas, prices.

    A job that can never fit (NoFit.never_fits) stays parked while this digest is unchanged."""
    digest = hashlib.blake2b(digest_size=12)
    for s in sorted(summaries, key=lambda x: x.cluster):
        digest.update(repr(_structure(s)).encode())
    return digest.hexdigest()


@dataclass
class _ShapeCache:
    prepared: placement.PreparedJob
    verdicts: dict[str, placement.ClusterVerdict]
    decision: Placement | NoFit | None = None


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
            cache = _ShapeCache(placement.prepare(job, self._policy), {})
            self._shapes[key] = cache
        if cache.decision is not None:
            return cache.decision
        verdicts = []
        for name, summary in self._summaries.items():
            verdict = cache.verdicts.get(name)
            if verdict is None:
                verdict = placement.evaluate(
                    cache.prepared, summary, self._traits.get(name), self._policy, self._now
                )
                self.evaluations += 1
                cache.verdicts[name] = verdict
            verdicts.append(verdict)
        cache.decision = placement.decide(cache.prepared, verdicts, self._policy)
        return cache.decision

    def update(self, summary: ClusterSummary) -> None:
        """A cluster's placeable summary changed: later decisions see it; other clusters' verdicts stay."""
        self._summaries[summary.cluster] = summary
        for cache in self._shapes.values():
            cache.verdicts.pop(summary.cluster, None)
            cache.decision = None
