"""Pure job lifecycle: which state a placed job is in, judged from what its member cluster says.

    QUEUED -> PLACED -> ADMITTED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
    and back to QUEUED (dispatch-failed, workload-lost, failover) with attempt + 1 at the next placement.

Owns only the decisions (`observe`, `orphan_reason`) and the ordering of the pending queue
(`queue_order`); the service applies the result. No I/O, no clock: `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker.core.model import FailoverPolicy, JobRecord, JobState
from broker.core.workloads import WorkloadRef, WorkloadStatus

# A Job we just created may not be visible yet; only after this long is "not found" a loss.
WORKLOAD_GRACE_SECONDS = 30.0

_ACTIVE = (JobState.PLACED, JobState.ADMITTED, JobState.RUNNING)


@dataclass(frozen=True)
class Transition:
    state: JobState
    reason: str


def observe(record: JobRecord, status: WorkloadStatus, now: float) -> Transition | None:
    """The transition the cluster's view implies for a job in PLACED/ADMITTED/RUNNING, or None."""
    if record.state not in _ACTIVE:
        return None
    where = record.cluster or "?"
    if not status.exists:
        if now - record.updated_at < WORKLOAD_GRACE_SECONDS:
            return None
        return failover(record, f"workload-lost: Job {status.name} disappeared from {where}")
    if status.complete:
        return Transition(JobState.SUCCEEDED, f"completed on {where} ({status.succeeded} pod(s) succeeded)")
    if status.failed_terminal and status.disrupted:
        return failover(record, f"disrupted on {where}: {status.message}")
    if status.failed_terminal:
        detail = f": {status.message}" if status.message else ""
        return Transition(JobState.FAILED, f"failed on {where}{detail}")
    if status.suspended:
        wanted = JobState.PLACED
        reason = f"waiting for Kueue admission on {where}"
    elif status.ready > 0 and status.ready + status.succeeded >= record.request.pods:
        # Job status.active counts Pending pods as well; only a ready pod surely holds its GPUs on a
        # node, and RUNNING releases the reservation, so every pod must be ready (or done) first.
        wanted = JobState.RUNNING
        reason = f"running on {where} ({status.ready} pod(s) ready)"
    else:
        wanted = JobState.ADMITTED
        reason = f"admitted on {where}, pods starting"
    if wanted == record.state:
        return None
    # Never step backwards from RUNNING to ADMITTED on a transient pod count.
    if record.state is JobState.RUNNING and wanted is JobState.ADMITTED:
        return None
    return Transition(wanted, reason)


def failover(record: JobRecord, why: str) -> Transition:
    """The job lost its place (cluster lost, Job gone, pods disrupted): by its failover policy, back to
    the queue (placed again, with attempt + 1) or FAILED."""
    if record.request.failover is FailoverPolicy.NEVER:
        return Transition(JobState.FAILED, f"{why} (failover: never)")
    return Transition(JobState.QUEUED, f"{why}; requeued (attempt {record.attempt} abandoned)")


def queue_order(records: Iterable[JobRecord], priorities: dict[str, int] | None = None) -> list[JobRecord]:
    """Pending jobs in placement order: higher priority class value first, then first come first served."""
    prio = priorities or {}

    def key(r: JobRecord) -> tuple[int, float, str]:
        return (-prio.get(r.request.priority_class or "", 0), r.created_at, r.id)

    return sorted(records, key=key)


def orphan_reason(ref: WorkloadRef, record: JobRecord | None) -> str | None:
    """Why a Job carrying the broker's labels should be removed from its cluster, or None to keep it.

    The caller lists the cluster's Jobs *before* it reads the records: the broker saves PLACED with the
    new attempt before it creates that attempt's Job, so a record read afterwards is at least as new as
    any Job in the list, and an attempt the record has moved past, or a record back in QUEUED or
    CANCELLED, means the Job is left over (a failed delete, a create that timed out but landed, a
    cluster that came back after its jobs were moved). A job id this store has never seen is left
    alone: it may belong to another broker sharing the cluster.
    """
    if record is None:
        return None
    if record.state is JobState.CANCELLED:
        return f"job {record.id} was cancelled"
    if ref.attempt < record.attempt:
        return f"stale attempt {ref.attempt} of job {record.id} (now at attempt {record.attempt})"
    if record.state is JobState.QUEUED:
        return f"job {record.id} is queued again; attempt {ref.attempt} is no longer wanted"
    if ref.attempt > record.attempt or (record.cluster is not None and ref.name != record.workload_name):
        return f"job {record.id} does not know attempt {ref.attempt} ({ref.name})"
    return None
