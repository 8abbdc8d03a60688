"""Filter: the cluster is not fenced (drained, or not yet swept after a loss), is reachable, and its summary is fresh (heartbeat within the
staleness limit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits, Health
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status

_UNHEALTHY = {
    Health.UNREACHABLE: "unreachable",
    Health.FORBIDDEN: "credentials rejected",
    Health.UNKNOWN: "not yet observed",
}


@dataclass(frozen=True)
class HealthFreshness:
    """`staleness_limit_seconds`: a summary whose heartbeat is older than this is "stale"."""

    name: ClassVar[str] = "health"
    staleness_limit_seconds: float = 120.0

    def applies(self, job: PreparedJob) -> bool:
        return True

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if summary.fence_reason:  # drained (docs/migration.md), or back from a loss and not yet swept
            return Status.unschedulable(summary.fence_reason)
        unhealthy = _UNHEALTHY.get(summary.health)
        if unhealthy is not None:
            return Status.unschedulable(unhealthy)
        if now - summary.heartbeat > self.staleness_limit_seconds:
            return Status.unschedulable("stale")
        return options
