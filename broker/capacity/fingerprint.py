"""The fleet's structural fingerprint: a digest of what decides whether a job can *ever* fit somewhere.

Owns `fingerprint(summaries)`: clusters, products, MIG profiles, Kueue quotas, tenant namespaces and
prices, not how much is free now. A job that can never fit (NoFit.never_fits) stays parked while it is
unchanged (the fleet cache keeps it; the scheduler reads it). Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from broker.core.model import ClusterSummary

__all__ = ["fingerprint"]


def _structure(s: ClusterSummary) -> tuple[object, ...]:
    """What of a summary decides whether a job can *ever* fit there (not how much is free now)."""
    return (
        s.cluster,
        str(s.tier),
        tuple(
            sorted(
                # the largest node's CPU and memory: a pod larger than any node fits once a larger joins
                (
                    p.product,
                    p.memory_mib,
                    p.allocatable > 0 or p.nodes > 0,
                    p.max_node_cpu_millis,
                    p.max_node_memory_mib,
                )
                for p in s.products
            )
        ),
        tuple(sorted((m.product, m.profile, m.resource_name) for m in s.mig)),
        tuple(sorted((q.cluster_queue, q.flavor, q.resource, q.nominal) for q in s.queues)),
        # tenant namespaces: created, their quotas' hard limits and LimitRanges changed (namespace-quota)
        tuple(
            (n.name, n.limits, tuple((q.name, tuple(sorted(q.hard.items()))) for q in n.quotas))
            for n in s.namespaces
        ),
        tuple(sorted(s.price_per_gpu_hour.items())),
    )


def fingerprint(summaries: Iterable[ClusterSummary]) -> str:
    """A digest of the fleet's structure: clusters, products, MIG profiles, Kueue quotas, prices.

    A job that can never fit (NoFit.never_fits) stays parked while this digest is unchanged."""
    digest = hashlib.blake2b(digest_size=12)
    for s in sorted(summaries, key=lambda x: x.cluster):
        digest.update(repr(_structure(s)).encode())
    return digest.hexdigest()
