"""Filter: whole GPUs fit, each pod on one node (gangs: all pods at once), read from the histograms.

Narrows the whole-GPU options to products where `pods_that_fit(gpus_per_pod) >= pods`.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.capacity import GPU
from broker.framework import CycleState, Option, Status
from broker.model import ClusterSummary, JobRequest


def _label(options: list[Option]) -> str:
    products = sorted({o.product for o in options})
    return products[0] if len(products) == 1 else "GPUs"


@dataclass(frozen=True)
class WholeGpuFit:
    name: str = "gpu-fit"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        whole = [o for o in ctx.options if o.resource_name == GPU and o.mig_profile is None]
        if not whole:
            return Status.success()
        g = whole[0].units_per_pod
        fits = [o for o in whole if o.capacity is not None and o.capacity.pods_that_fit(g) >= job.pods]
        if fits:
            ctx.options = fits
            return Status.success()
        what = _label(whole)
        if job.pods == 1:
            best = max((o.capacity.max_free_on_one_node for o in whole if o.capacity), default=0)
            return Status.unschedulable(f"no node with {g} free {what}", best=best)
        best = max((o.capacity.pods_that_fit(g) for o in whole if o.capacity), default=0)
        return Status.unschedulable(f"no room for {job.pods} pods x {g} {what}", best=best)
