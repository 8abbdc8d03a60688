"""Filter: a job that names clusters (job.clusters) goes only to those, and never to a cluster it was
withdrawn from lately (job.avoid_clusters: member trouble, broker.workload.member_trouble)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status


@dataclass(frozen=True)
class ClusterAllowList:
    name: ClassVar[str] = "allowlist"

    def applies(self, job: PreparedJob) -> bool:
        return bool(job.job.clusters or job.job.avoid_clusters)

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if job.job.clusters and summary.cluster not in job.job.clusters:
            return Status.unresolvable("not in the job's cluster list")
        if summary.cluster in job.job.avoid_clusters:
            # resolvable: the cluster is offered to the job again once memberAvoidSeconds pass
            return Status.unschedulable("withdrawn from lately (member trouble)")
        return options
