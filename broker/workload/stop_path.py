"""How a running job is stopped, per trigger (docs/migration.md): the pure choice of the stop path.

    choose(trigger, grace, answers)  -> StopPlan

    CHECKPOINT  the member answers and the job checkpoints: its pods are deleted with the job's grace period
                (SIGTERM, then N seconds to save), the reference is read from the containers' termination
                message, and the next attempt is held back until the old one is gone (at most grace + a
                margin from when the stop starts), so two attempts never run at once
    PLAIN       the member answers, the job does not checkpoint: the Job is deleted as before; the next
                attempt starts from the last recorded checkpoint (if any), else from scratch
    REPORTED    the member cannot be asked (lost, partitioned) or the pods are already gone (disrupted):
                nothing to stop; the next attempt resumes from the last checkpoint the pod reported
                periodically (annotation gpufed.io/checkpoint), else from scratch

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["STOP_MARGIN_SECONDS", "STOP_START_SECONDS", "StopPath", "StopPlan", "Trigger", "choose"]

# What the hold adds to the grace period: the kubelet's kill and the pod's removal after it.
STOP_MARGIN_SECONDS = 10.0
# And the longest a stop may wait for its cluster's dispatcher thread (a drain of many jobs queues
# them); the stop pushes the hold out again to grace + margin from when it starts.
STOP_START_SECONDS = 60.0


class Trigger(StrEnum):
    MIGRATE = "migrate"  # gpufed migrate / POST /v1/jobs/{id}/migrate, and burst-back
    PREEMPTION = "preemption"  # fleet preemption by a higher priority
    BUDGET = "budget"  # the tenant's hard budget is spent
    DRAIN = "drain"  # gpufed drain CLUSTER (planned maintenance)
    MEMBER_LEFT = "member-left"  # the cluster left the fleet (ClusterProfile deleted)
    FAILOVER = "failover"  # the job's cluster is failed over while it still answers
    CLUSTER_LOST = "cluster-lost"  # the cluster does not answer: it cannot be asked
    DISRUPTED = "disrupted"  # the pods are already gone (node lost, spot reclaimed, member preemption)
    GPU_FAULT = "gpu-fault"  # a GPU it runs on went fatal, or its pod died of it (docs/health.md)


class StopPath(StrEnum):
    CHECKPOINT = "checkpoint"
    PLAIN = "plain"
    REPORTED = "reported"


@dataclass(frozen=True)
class StopPlan:
    path: StopPath
    grace_seconds: int = 0  # the deletion's grace period (CHECKPOINT)
    hold_seconds: float = 0.0  # the stop follows the old attempt's pods at most this long

    @property
    def first_hold_seconds(self) -> float:
        """How long the next attempt is held back from the requeue: the stop lifts it once the pods are
        gone, or pushes it to hold_seconds from when it starts."""
        return self.hold_seconds + STOP_START_SECONDS if self.hold_seconds else 0.0

    @property
    def asks_the_job(self) -> bool:
        return self.path is StopPath.CHECKPOINT


_NOTHING_TO_STOP = frozenset({Trigger.CLUSTER_LOST, Trigger.DISRUPTED})


def choose(trigger: Trigger, grace_seconds: int | None, answers: bool = True) -> StopPlan:
    """The stop path for a job stopped by `trigger`; `grace_seconds` is its checkpoint contract (None:
    it does not checkpoint), `answers` whether its member cluster answers now."""
    if trigger in _NOTHING_TO_STOP or not answers:
        return StopPlan(StopPath.REPORTED)
    if grace_seconds is None or grace_seconds <= 0:
        return StopPlan(StopPath.PLAIN)
    return StopPlan(StopPath.CHECKPOINT, grace_seconds, grace_seconds + STOP_MARGIN_SECONDS)
