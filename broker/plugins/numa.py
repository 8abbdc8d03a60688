"""Filter: NUMA-aligned jobs need each pod's GPUs free inside one NUMA zone of a node.

Reads the numa_blocks histogram (largest free GPU block inside one zone, per node).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.capacity import GPU
from broker.framework import CycleState, Status
from broker.model import ClusterSummary, JobRequest


@dataclass(frozen=True)
class NumaFit:
    name: str = "numa-fit"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        if not job.numa_aligned:
            return Status.success()
        whole = [o for o in ctx.options if o.resource_name == GPU and o.mig_profile is None and o.capacity]
        if not whole:
            return Status.success()
        g = whole[0].units_per_pod
        fits = [o for o in whole if o.capacity and o.capacity.nodes_with_numa_block(g) >= job.pods]
        if fits:
            ctx.options = fits
            return Status.success()
        best = max(
            (
                max((k for k, n in enumerate(o.capacity.numa_blocks) if n), default=0)
                for o in whole
                if o.capacity
            ),
            default=0,
        )
        products = sorted({o.product for o in whole})
        what = products[0] if len(products) == 1 else "GPUs"
        if job.pods == 1:
            return Status.unschedulable(f"no node with {g} free {what} in one NUMA zone", best=best)
        return Status.unschedulable(f"no {job.pods} nodes with {g} free {what} in one NUMA zone", best=best)
