"""Kueue: a filter (the ClusterQueue quota has room for the whole job) and a headroom score.

Applies where the cluster runs Kueue (traits.kueue_local_queue set and queues observed). A flavor named
like the product (h100-80gb for H100-80GB) is preferred; otherwise any flavor covering the resource.
Which quota entries cover an option is worked out once per summary (framework.memo).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits, QueueHeadroom
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status, memo

__all__ = ["KueueHeadroom", "QueueHeadroomScore", "quota_for", "runs_kueue"]


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def runs_kueue(summary: ClusterSummary, traits: ClusterTraits | None) -> bool:
    return bool(traits is not None and traits.kueue_local_queue and summary.queues)


def _quota(summary: ClusterSummary, resource: str, product: str) -> tuple[QueueHeadroom, ...]:
    covering = [q for q in summary.queues if q.resource == resource]
    named = [q for q in covering if _key(q.flavor) == _key(product)]
    return tuple(named or covering)


def quota_for(summary: ClusterSummary, option: RunOption) -> tuple[QueueHeadroom, ...]:
    """The quota entries that could admit an option: its resource, same-named flavor first if any."""
    resource, product = option.resource_name, option.product
    return memo(summary, ("quota", resource, product), _quota, summary, resource, product)


@dataclass(frozen=True)
class KueueHeadroom:
    name: ClassVar[str] = "kueue"

    def applies(self, job: PreparedJob) -> bool:
        return job.job.gpus_per_pod > 0 or job.job.wants_mig

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if not runs_kueue(summary, traits):
            return options
        gpu_options = [o for o in options if o.resource_name]
        if not gpu_options:
            return options
        fits, best, covered = [], 0, False
        for o in gpu_options:
            quota = quota_for(summary, o)
            covered = covered or bool(quota)
            room = max((q.headroom for q in quota), default=0)
            best = max(best, room)
            if room >= o.units_per_pod * job.job.pods:
                fits.append(o)
        if fits:
            return options if len(fits) == len(options) else fits
        resource = gpu_options[0].resource_name
        if not covered:
            return Status.unresolvable(f"Kueue quota does not cover {resource}")
        return Status.unschedulable(f"Kueue quota for {resource} exhausted", best=best)


@dataclass(frozen=True)
class QueueHeadroomScore:
    """More room left after the job scores higher: Kueue quota where Kueue runs, else free GPUs."""

    name: ClassVar[str] = "queue"
    weight: int = 1

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int:
        if not option.resource_name:
            return 50
        need = option.units_per_pod * job.job.pods
        if traits is not None and traits.kueue_local_queue and summary.queues:  # runs_kueue()
            quota = quota_for(summary, option)
            nominal = max((q.nominal for q in quota), default=0)
            room = max((q.headroom for q in quota), default=0)
            return round(100 * max(0, room - need) / nominal) if nominal else 0
        if option.mig is not None:
            free, allocatable = option.mig.free, option.mig.allocatable
        elif option.capacity is not None:
            free, allocatable = option.capacity.free, option.capacity.allocatable
        else:
            return 0
        return round(100 * max(0, free - need) / allocatable) if allocatable else 0
