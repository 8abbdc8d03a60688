"""Score: bin-packing (fill the tightest node, leave big blocks whole) or spread (most room left).

Bin-packing reads the histogram: the node a pod would land on is the one with the fewest free GPUs that
still fit it; waste = its free GPUs minus the pod's. Spread prefers the most free capacity after the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.framework import CycleState, Option
from broker.model import ClusterSummary, JobRequest

__all__ = ["BinPackScore", "tightness"]


def tightness(option: Option, job: JobRequest) -> int:
    """0..100: how snugly the job fills the nodes it would land on (100 = no GPU left over)."""
    if option.mig is not None:
        per_pod = job.mig_slices_per_pod
        largest = option.mig.largest_free_on_node
        return round(100 * per_pod / largest) if largest >= per_pod > 0 else 0
    cap = option.capacity
    g = option.units_per_pod
    if cap is None or g <= 0:
        return 50
    remaining, used = job.pods, 0
    for k, n in enumerate(cap.nodes_by_free):
        if k < g or n == 0 or remaining <= 0:
            continue
        pods_here = min(remaining, n * (k // g))
        nodes_used = -(-pods_here // (k // g))
        used += nodes_used * k
        remaining -= pods_here
    if remaining > 0 or used == 0:
        return 0
    return round(100 * g * job.pods / used)


def spread(option: Option, job: JobRequest) -> int:
    """0..100: the share of the product's capacity still free after the job."""
    need = option.units_per_pod * job.pods
    if option.mig is not None:
        free, allocatable = option.mig.free, option.mig.allocatable
    elif option.capacity is not None:
        free, allocatable = option.capacity.free, option.capacity.allocatable
    else:
        return 50
    return round(100 * max(0, free - need) / allocatable) if allocatable else 0


@dataclass(frozen=True)
class BinPackScore:
    name: str = "binpack"
    weight: int = 2

    def score(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> int:
        if ctx.chosen is None:
            return 0
        return tightness(ctx.chosen, job) if ctx.binpack else spread(ctx.chosen, job)
