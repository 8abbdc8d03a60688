"""Filter: cloud (burst) clusters only for jobs that allow bursting.

That on-prem wins whenever an on-prem cluster fits is the placer's rule (placement.decide), not a
filter: it needs every cluster's verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits, Tier
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status


@dataclass(frozen=True)
class BurstEligibility:
    name: ClassVar[str] = "burst"

    def applies(self, job: PreparedJob) -> bool:
        return not job.job.allow_burst

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if summary.tier is Tier.CLOUD and not job.job.allow_burst:
            return Status.unresolvable("burst not allowed")
        return options
