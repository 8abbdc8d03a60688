"""Filter: the job may run only in the clusters it names (job.clusters; empty = any)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.framework import CycleState, Status
from broker.model import ClusterSummary, JobRequest


@dataclass(frozen=True)
class ClusterAllowList:
    name: str = "allowlist"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        if job.clusters and summary.cluster not in job.clusters:
            return Status.unresolvable("not in the job's cluster list")
        return Status.success()
