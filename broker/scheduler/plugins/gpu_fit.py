"""Filter: whole GPUs fit, each pod on one node (gangs: all pods at once), read from the histograms.

Narrows the whole-GPU options to products where `pods_that_fit(gpus_per_pod) >= pods`. How many pods of
g GPUs each product takes is worked out once per summary and size (framework.memo), so a cluster
costs one dict look-up per product here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.capacity.kube_objects import GPU
from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import Code, FilterResult, PreparedJob, RunOption, Status, memo

__all__ = ["NUMA_POLICY_NOTE", "WholeGpuFit", "fit_table"]

NUMA_POLICY_NOTE = "topology policy single-numa-node"


def _fit_table(summary: ClusterSummary, gpus_per_pod: int) -> dict[tuple[str, bool], int]:
    return {
        (k.product, k.dra): k.pods_that_fit(gpus_per_pod) for p in summary.products for k in (p.kinds or (p,))
    }


def fit_table(summary: ClusterSummary, gpus_per_pod: int) -> dict[tuple[str, bool], int]:
    """(product, DRA kind) -> how many pods of `gpus_per_pod` whole GPUs fit, each on one node, in that
    kind alone (a product served both ways has a row per kind); once per summary."""
    key = ("fit", gpus_per_pod)
    table: dict[tuple[str, bool], int] | None = summary.derived.get(key)  # memo(), inlined: once per cluster
    if table is None:
        table = memo(summary, key, _fit_table, summary, gpus_per_pod)
    return table


def _label(options: Sequence[RunOption]) -> str:
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
        options: Sequence[RunOption],
    ) -> FilterResult:
        pods = job.job.pods
        fit = fit_table(summary, job.job.gpus_per_pod)
        if len(options) == 1:  # the common case, without building a list
            o = options[0]
            if (
                o.capacity is not None
                and o.mig_profile is None
                and o.resource_name == GPU
                and fit.get((o.product, o.dra), 0) >= pods
            ):
                return options
        fits = [
            o
            for o in options
            if o.capacity is not None
            and o.mig_profile is None
            and o.resource_name == GPU
            and fit.get((o.product, o.dra), 0) >= pods
        ]
        if fits:
            return options if len(fits) == len(options) else fits
        whole = [o for o in options if o.resource_name == GPU and o.mig_profile is None]
        if not whole:
            return options
        # A full cluster is rejected the same way by every job of this size: worked out once per summary.
        key = ("gpu-fit:no", job.job.gpus_per_pod, pods, tuple(o.product for o in whole))
        rejection: Status | None = summary.derived.get(key)
        if rejection is None:
            rejection = memo(summary, key, self._rejection, whole, pods)
        return rejection

    def _rejection(self, whole: Sequence[RunOption], pods: int) -> Status:
        g = whole[0].units_per_pod
        what = _label(whole)
        # Nodes with g free GPUs that the kubelet's single-numa-node policy still refuses (no zone holds g):
        # the policy is the cause, and the reason names it rather than "best: 4" with no why.
        numa = any(o.capacity.single_numa_node_free >= g for o in whole if o.capacity)
        why = f" in one NUMA zone ({NUMA_POLICY_NOTE})" if numa else ""
        if pods == 1:
            best = max((o.capacity.max_free_on_one_node for o in whole if o.capacity), default=0)
            return Status(Code.UNSCHEDULABLE, f"no node with {g} free {what}{why}", self.name, best)
        best = max((o.capacity.pods_that_fit(g) for o in whole if o.capacity), default=0)
        return Status(Code.UNSCHEDULABLE, f"no room for {pods} pods x {g} {what}{why}", self.name, best)
