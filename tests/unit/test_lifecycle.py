"""A placed job's state follows what its member cluster says about the Job."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.model import JobRecord, JobRequest, JobState
from broker.core.workloads import WorkloadRef, WorkloadStatus
from broker.workload.lifecycle import WORKLOAD_GRACE_SECONDS, observe, queue_order

NOW = 1_000_000.0


def _record(state: JobState, pods: int = 1, updated_at: float = NOW - 100) -> JobRecord:
    return JobRecord(
        id="j1",
        request=JobRequest(name="train", gpus_per_pod=1, pods=pods),
        state=state,
        attempt=1,
        cluster="onprem-a",
        workload_name="gpufed-j1-1",
        created_at=NOW - 200,
        updated_at=updated_at,
    )


def _status(**kw: object) -> WorkloadStatus:
    base: dict[str, object] = {"name": "gpufed-j1-1", "namespace": "default", "exists": True}
    base.update(kw)
    return WorkloadStatus(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "status", "expected"),
    [
        (JobState.PLACED, _status(suspended=True), None),
        (JobState.PLACED, _status(), JobState.ADMITTED),
        (JobState.PLACED, _status(active=1, ready=1), JobState.RUNNING),
        # Job status.active counts Pending pods too: active without ready is not running yet.
        (JobState.ADMITTED, _status(active=1, ready=0), None),
        (JobState.PLACED, _status(active=1, ready=0), JobState.ADMITTED),
        (JobState.RUNNING, _status(active=1, ready=1), None),
        (JobState.RUNNING, _status(active=0), None),
        (JobState.RUNNING, _status(complete=True, succeeded=1), JobState.SUCCEEDED),
        (JobState.PLACED, _status(complete=True, succeeded=1), JobState.SUCCEEDED),
        (
            JobState.RUNNING,
            _status(failed_terminal=True, failed=1, message="BackoffLimitExceeded"),
            JobState.FAILED,
        ),
        (JobState.RUNNING, _status(exists=False), JobState.QUEUED),
        (JobState.QUEUED, _status(active=1), None),
        (JobState.SUCCEEDED, _status(failed_terminal=True), None),
    ],
)
def test_state_follows_the_cluster(
    state: JobState, status: WorkloadStatus, expected: JobState | None
) -> None:
    step = observe(_record(state), status, NOW)
    assert (step.state if step else None) == expected


def test_gang_is_running_only_when_every_pod_is_ready_or_done() -> None:
    """RUNNING releases the job's reservation, so it must mean every pod holds its GPUs on a node:
    Job status.active counts Pending (unscheduled) pods, which no node's allocated GPUs include yet."""
    rec = _record(JobState.ADMITTED, pods=4)
    assert observe(rec, _status(active=2), NOW) is None
    assert observe(rec, _status(active=4), NOW) is None
    assert observe(rec, _status(active=4, ready=1), NOW) is None
    step = observe(rec, _status(active=4, ready=4), NOW)
    assert step is not None and step.state is JobState.RUNNING
    step = observe(rec, _status(active=3, ready=3, succeeded=1), NOW)
    assert step is not None and step.state is JobState.RUNNING


def test_a_just_created_workload_that_is_not_visible_yet_is_not_lost() -> None:
    rec = _record(JobState.PLACED, updated_at=NOW - WORKLOAD_GRACE_SECONDS / 2)
    assert observe(rec, _status(exists=False), NOW) is None


def test_failure_reason_carries_the_cluster_message() -> None:
    step = observe(
        _record(JobState.RUNNING), _status(failed_terminal=True, message="BackoffLimitExceeded"), NOW
    )
    assert step is not None and "onprem-a" in step.reason and "BackoffLimitExceeded" in step.reason


def test_queue_order_is_priority_then_first_come() -> None:
    base = _record(JobState.QUEUED)
    a = replace(base, id="a", created_at=3, request=replace(base.request, priority_class=None))
    b = replace(base, id="b", created_at=2, request=replace(base.request, priority_class="low"))
    c = replace(base, id="c", created_at=5, request=replace(base.request, priority_class="high"))
    d = replace(base, id="d", created_at=1, request=replace(base.request, priority_class=None))
    order = queue_order([a, b, c, d], {"high": 1000, "low": -10})
    assert [r.id for r in order] == ["c", "d", "a", "b"]


@pytest.mark.parametrize(
    ("state", "record_attempt", "ref_attempt", "deleted"),
    [
        (JobState.RUNNING, 2, 2, False),  # the live attempt
        (JobState.SUCCEEDED, 2, 2, False),  # finished: its Job stays for logs
        (JobState.RUNNING, 2, 1, True),  # an older attempt came back (cluster returned after failover)
        (JobState.QUEUED, 2, 2, True),  # sent back to the queue: its last attempt is no longer wanted
        (JobState.CANCELLED, 2, 2, True),  # a cancel whose delete failed
        (JobState.PLACED, 2, 3, True),  # an attempt the record never made
    ],
)
def test_orphan_reason(state: JobState, record_attempt: int, ref_attempt: int, deleted: bool) -> None:

    from broker.workload.lifecycle import orphan_reason

    record = replace(_record(state), attempt=record_attempt, workload_name=f"gpufed-j1-{record_attempt}")
    ref = WorkloadRef(name=f"gpufed-j1-{ref_attempt}", namespace="default", job_id="j1", attempt=ref_attempt)
    assert (orphan_reason(ref, record) is not None) is deleted


def test_a_job_id_this_broker_never_saw_is_left_alone() -> None:

    from broker.workload.lifecycle import orphan_reason

    assert orphan_reason(WorkloadRef("x", "default", "j-other", 1), None) is None
