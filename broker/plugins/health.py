"""Filter: the cluster is reachable and its summary is fresh (heartbeat within the staleness limit)."""

from __future__ import annotations

from dataclasses import dataclass

from broker.framework import CycleState, Status
from broker.model import ClusterSummary, Health, JobRequest

_UNHEALTHY = {
    Health.UNREACHABLE: "unreachable",
    Health.FORBIDDEN: "credentials rejected",
    Health.UNKNOWN: "not yet observed",
}


@dataclass(frozen=True)
class HealthFreshness:
    name: str = "health"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        if summary.health in _UNHEALTHY:
            return Status.unschedulable(_UNHEALTHY[summary.health])
        if ctx.now - summary.heartbeat > ctx.staleness_limit_s:
            return Status.unschedulable("stale")
        return Status.success()
