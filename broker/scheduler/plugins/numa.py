"""Filter: NUMA-aligned jobs need each pod's GPUs free inside one NUMA zone of a node.

Reads the numa_blocks histogram (largest free GPU block inside one zone, per node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.capacity.kube_objects import GPU
from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status


@dataclass(frozen=True)
class NumaFit:
    name: ClassVar[str] = "numa-fit"

    def applies(self, job: PreparedJob) -> bool:
        return job.job.numa_aligned and job.job.gpus_per_pod > 0 and not job.job.wants_mig

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if not job.job.numa_aligned:
            return options
        whole = [o for o in options if o.resource_name == GPU and o.mig_profile is None and o.capacity]
        if not whole:
            return options
        g = whole[0].units_per_pod
        pods = job.job.pods
        fits = [o for o in whole if o.capacity and o.capacity.nodes_with_numa_block(g) >= pods]
        if fits:
            return options if len(fits) == len(options) else fits
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
        if pods == 1:
            return Status.unschedulable(f"no node with {g} free {what} in one NUMA zone", best=best)
        return Status.unschedulable(f"no {pods} nodes with {g} free {what} in one NUMA zone", best=best)
