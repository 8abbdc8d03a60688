"""What a member cluster says of the workloads the broker created there: the Jobs found by the broker's
labels (WorkloadRef, what a rebuild and the sweep list) and a Job's status (WorkloadStatus, what the
lifecycle judges). Frozen dataclasses; pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["WorkloadRef", "WorkloadStatus"]


@dataclass(frozen=True)
class WorkloadRef:
    """A Job in a member cluster that carries the broker's labels (gpufed.io/job-id, gpufed.io/attempt)."""

    name: str
    namespace: str
    job_id: str
    attempt: int
    # The Job's annotations (the recovery ones: request, idempotency key, submitted-at, federation).
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    created_at: float = 0.0  # metadata.creationTimestamp as epoch seconds (0 when unknown)


@dataclass(frozen=True)
class WorkloadStatus:
    """What a member cluster says about a Job the broker created there."""

    name: str
    namespace: str
    exists: bool
    suspended: bool = False
    active: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    complete: bool = False
    failed_terminal: bool = False
    disrupted: bool = False  # failed because a pod was disrupted (node lost, spot reclaimed, preempted)
    message: str = ""
