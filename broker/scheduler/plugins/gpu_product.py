"""Filter: the cluster has an acceptable GPU product (job.gpu_products) with enough memory.

Narrows the options to the acceptable products; names what is missing when none is left. The wanted
products are normalised to catalog names once per decision (PreparedJob.wanted_products).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits, JobRequest
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status

__all__ = ["GpuProductMemory", "describe_gpu_need"]


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
    name: ClassVar[str] = "gpu-product"

    def applies(self, job: PreparedJob) -> bool:
        return True  # a cluster that offers the job nothing at all is rejected here

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if not options:
            return Status.unresolvable(f"no {job.need}")
        if not options[0].resource_name:
            return options  # a job without GPUs
        narrowed = options
        wanted = job.wanted_products
        if wanted:
            narrowed = [o for o in narrowed if o.product in wanted]
            if not narrowed:
                return Status.unresolvable(f"no {' or '.join(sorted(wanted))}")
        min_memory = job.job.min_gpu_memory_mib
        if min_memory:
            narrowed = [o for o in narrowed if o.memory_mib >= min_memory]
            if not narrowed:
                return Status.unresolvable(f"no GPU with >= {min_memory} MiB")
        return options if len(narrowed) == len(options) else narrowed
