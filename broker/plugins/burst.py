"""Filter: cloud (burst) clusters only for jobs that allow bursting.

That on-prem wins whenever an on-prem cluster fits is the placer's rule (placement.py), not a filter:
it needs every cluster's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.framework import CycleState, Status
from broker.model import ClusterSummary, JobRequest, Tier


@dataclass(frozen=True)
class BurstEligibility:
    name: str = "burst"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        if summary.tier is Tier.CLOUD and not job.allow_burst:
            return Status.unresolvable("burst not allowed")
        return Status.success()
