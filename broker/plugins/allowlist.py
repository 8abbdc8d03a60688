"""Filter: a job that names clusters (job.clusters) goes only to those."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.framework import FilterResult, Option, PreparedJob, Status
from broker.model import ClusterSummary, ClusterTraits


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
        options: Sequence[Option],
    ) -> FilterResult:
        if job.job.clusters and summary.cluster not in job.job.clusters:
            return Status.unresolvable("not in the job's cluster list")
        return options
