"""Filter: the cluster has an acceptable GPU product (job.gpu_products) with enough memory.

Narrows the CycleState options to the acceptable products; names what is missing when none is left.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker import catalog
from broker.framework import CycleState, Status
from broker.model import ClusterSummary, JobRequest


def describe_gpu_need(job: JobRequest) -> str:
    """What the job asks for, as a noun phrase: "MIG 1g.10gb", "MIG >= 10 GB", "H100-80GB", "GPUs"."""
    if job.mig_profile is not None:
        return f"MIG {job.mig_profile}"
    if job.mig_need is not None:
        return f"MIG >= {job.mig_need.memory_gb} GB"
    if len(job.gpu_products) == 1:
        return job.gpu_products[0]
    return "GPUs"


@dataclass(frozen=True)
class GpuProductMemory:
    name: str = "gpu-product"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        if not ctx.options:
            return Status.unresolvable(f"no {describe_gpu_need(job)}")
        if not ctx.options[0].resource_name:
            return Status.success()  # a job without GPUs
        options = ctx.options
        if job.gpu_products:
            wanted = {catalog.normalise_product(p).name for p in job.gpu_products}
            options = [o for o in options if o.product in wanted]
            if not options:
                return Status.unresolvable(f"no {' or '.join(sorted(wanted))}")
        if job.min_gpu_memory_mib:
            options = [o for o in options if o.memory_mib >= job.min_gpu_memory_mib]
            if not options:
                return Status.unresolvable(f"no GPU with >= {job.min_gpu_memory_mib} MiB")
        ctx.options = options
        return Status.success()
