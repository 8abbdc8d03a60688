"""Kueue: a filter (the ClusterQueue quota has room for the whole job) and a headroom score.

Applies where the cluster runs Kueue (traits.kueue_local_queue set and queues observed). A flavor named
like the product (h100-80gb for H100-80GB) is preferred; otherwise any flavor covering the resource.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.framework import CycleState, Option, Status
from broker.model import ClusterSummary, JobRequest, QueueHeadroom


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def runs_kueue(summary: ClusterSummary, ctx: CycleState) -> bool:
    return bool(ctx.traits is not None and ctx.traits.kueue_local_queue and summary.queues)


def quota_for(summary: ClusterSummary, option: Option) -> list[QueueHeadroom]:
    """The quota entries that could admit an option: its resource, same-named flavor first if any."""
    covering = [q for q in summary.queues if q.resource == option.resource_name]
    named = [q for q in covering if _key(q.flavor) == _key(option.product)]
    return named or covering


@dataclass(frozen=True)
class KueueHeadroom:
    name: str = "kueue"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        if not runs_kueue(summary, ctx):
            return Status.success()
        gpu_options = [o for o in ctx.options if o.resource_name]
        if not gpu_options:
            return Status.success()
        fits, best, covered = [], 0, False
        for o in gpu_options:
            quota = quota_for(summary, o)
            covered = covered or bool(quota)
            room = max((q.headroom for q in quota), default=0)
            best = max(best, room)
            if room >= o.units_per_pod * job.pods:
                fits.append(o)
        if fits:
            ctx.options = fits
            return Status.success()
        resource = gpu_options[0].resource_name
        if not covered:
            return Status.unresolvable(f"Kueue quota does not cover {resource}")
        return Status.unschedulable(f"Kueue quota for {resource} exhausted", best=best)


@dataclass(frozen=True)
class QueueHeadroomScore:
    """More room left after the job scores higher: Kueue quota where Kueue runs, else free GPUs."""

    name: str = "queue"
    weight: int = 1

    def score(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> int:
        o = ctx.chosen
        if o is None or not o.resource_name:
            return 50
        need = o.units_per_pod * job.pods
        if runs_kueue(summary, ctx):
            quota = quota_for(summary, o)
            nominal = max((q.nominal for q in quota), default=0)
            room = max((q.headroom for q in quota), default=0)
            return round(100 * max(0, room - need) / nominal) if nominal else 0
        if o.mig is not None:
            free, allocatable = o.mig.free, o.mig.allocatable
        elif o.capacity is not None:
            free, allocatable = o.capacity.free, o.capacity.allocatable
        else:
            return 0
        return round(100 * max(0, free - need) / allocatable) if allocatable else 0
