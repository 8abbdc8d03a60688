"""Filter: a job that names clusters (job.clusters) goes only to those."""

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
        return bool(job.job.clusters)

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
        return options
