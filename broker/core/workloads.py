"""What a member cluster says of the workloads the broker created there: the Jobs found by the broker's
labels (WorkloadRef, what a rebuild and the sweep list) and a Job's status (WorkloadStatus, what the
lifecycle judges), and what its pods and the Job controller's events say when something goes wrong there
(MemberTrouble, what broker.workload.member_trouble judges). Frozen dataclasses; pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["MemberTrouble", "PodTrouble", "Termination", "WorkloadRef", "WorkloadStatus"]


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


@dataclass(frozen=True)
class PodTrouble:
    """Why a Job's pods do not start or keep failing, in the member's own words: `kind` is the member's
    reason (Unschedulable, FailedCreate, ErrImagePull, ImagePullBackOff, CreateContainerConfigError,
    CrashLoopBackOff, OOMKilled, Evicted) and `message` its message (the scheduler's, the admission
    plugin's, the registry's...)."""

    kind: str
    message: str = ""
    pod: str = ""  # the pod it was read from ("" for a Job controller event)


@dataclass(frozen=True)
class Termination:
    """A container's last termination with a non-zero exit code (state or lastState.terminated)."""

    reason: str
    exit_code: int
    pod: str = ""
    container: str = ""


@dataclass(frozen=True)
class MemberTrouble:
    """What the member says of one Job's pods beyond the Job's status: the worst trouble now (None: none)
    and the last failed termination seen."""

    trouble: PodTrouble | None = None
    termination: Termination | None = None
