"""Filter: whole GPUs fit, each pod on one node (gangs: all pods at once), read from the histograms.

Narrows the whole-GPU options to products where `pods_that_fit(gpus_per_pod) >= pods`. How many pods of
g GPUs a product takes is computed once per summary and size (framework.memo).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.capacity import GPU
from broker.framework import FilterResult, Option, PreparedJob, Status, memo
from broker.model import ClusterSummary, ClusterTraits, ProductCapacity

__all__ = ["WholeGpuFit", "pods_that_fit"]


def pods_that_fit(summary: ClusterSummary, capacity: ProductCapacity, gpus_per_pod: int) -> int:
    """capacity.pods_that_fit(gpus_per_pod), once per summary."""
    return memo(
        summary, ("fit", capacity.product, gpus_per_pod), lambda: capacity.pods_that_fit(gpus_per_pod)
    )


def _label(options: Sequence[Option]) -> str:
    products = sorted({o.product for o in options})
    return products[0] if len(products) == 1 else "GPUs"


@dataclass(frozen=True)
class WholeGpuFit:
    name: ClassVar[str] = "gpu-fit"

    def applies(self, job: PreparedJob) -> bool:
        return job.job.gpus_per_pod > 0 and not job.job.wants_mig

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[Option],
    ) -> FilterResult:
        whole = [o for o in options if o.resource_name == GPU and o.mig_profile is None]
        if not whole:
            return options
        g = whole[0].units_per_pod
        pods = job.job.pods
        fits = [o for o in whole if o.capacity is not None and pods_that_fit(summary, o.capacity, g) >= pods]
        if fits:
            return options if len(fits) == len(options) else fits
        what = _label(whole)
        if pods == 1:
            best = max((o.capacity.max_free_on_one_node for o in whole if o.capacity), default=0)
            return Status.unschedulable(f"no node with {g} free {what}", best=best)
        best = max((pods_that_fit(summary, o.capacity, g) for o in whole if o.capacity), default=0)
        return Status.unschedulable(f"no room for {pods} pods x {g} {what}", best=best)
