"""Score: bin-packing (fill the tightest node, leave big blocks whole) or spread (most room left).

Bin-packing reads the histogram: the node a pod would land on is the one with the fewest free GPUs that
still fit it; waste = its free GPUs minus the pod's. Spread prefers the most free capacity after the job.
The strategy is the plugin's knob (`strategy`); the tightness of a whole-GPU fit is computed once per
summary, product and job size (framework.memo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, ProductCapacity
from broker.scheduler.framework import PreparedJob, RunOption, memo

__all__ = ["BinPackScore", "spread", "tightness"]


def _histogram_tightness(cap: ProductCapacity, g: int, pods: int) -> int:
    remaining, used = pods, 0
    for k, n in enumerate(cap.nodes_by_free):
        if k < g or n == 0 or remaining <= 0:
            continue
        pods_here = min(remaining, n * (k // g))
        nodes_used = -(-pods_here // (k // g))
        used += nodes_used * k
        remaining -= pods_here
    if remaining > 0 or used == 0:
        return 0
    return round(100 * g * pods / used)


def tightness(option: RunOption, job: JobRequest) -> int:
    """0..100: how snugly the job fills the nodes it would land on (100 = no GPU left over)."""
    if option.mig is not None:
        per_pod = job.mig_slices_per_pod
        largest = option.mig.largest_free_on_node
        return round(100 * per_pod / largest) if largest >= per_pod > 0 else 0
    cap = option.capacity
    g = option.units_per_pod
    if cap is None or g <= 0:
        return 50
    return _histogram_tightness(cap, g, job.pods)


def spread(option: RunOption, job: JobRequest) -> int:
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
    """`strategy`: "binpack" (fill nodes, keep big blocks whole) or "spread" (most room left)."""

    name: ClassVar[str] = "binpack"
    weight: int = 2
    strategy: Literal["binpack", "spread"] = "binpack"

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int:
        if self.strategy == "spread":
            return spread(option, job.job)
        cap = option.capacity
        if option.mig is not None or cap is None or option.units_per_pod <= 0:
            return tightness(option, job.job)
        g, pods = option.units_per_pod, job.job.pods
        key = ("tight", cap.product, g, pods)
        value: int | None = summary.derived.get(key)  # memo(), inlined: once per cluster
        if value is None:
            value = memo(summary, key, _histogram_tightness, cap, g, pods)
        return value
