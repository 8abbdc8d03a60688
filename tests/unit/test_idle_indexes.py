"""What keeps an idle pass from growing with the jobs held: the workload-kind index of JobRecords (status
sync reads those jobs every pass, and finds them without walking every placed job), the index of the
jobs that checkpoint (their reported checkpoints are read every 30 s), the one
MemberWatch question per gateway (not one per job per resync), and the quiet test a resync asks of
each running job before it sets up the job's trace context (MemberTroubles._member_quiet)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from broker.controller.job_records import PLACED_STATES, JobRecords
from broker.controller.member_troubles import MemberTroubles, TroubleMemory
from broker.core.model import JobRecord, JobRequest, JobState
from broker.core.workloads import MemberTrouble, PodTrouble
from broker.workload.member_trouble import TROUBLE_PREFIX

JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {}}


class Store:
    """The three reads JobRecords makes of a StateStore."""

    def __init__(self, records: list[JobRecord]) -> None:
        self.records = {r.id: r for r in records}
        self.changes: list[tuple[str, str, str]] = []

    def last_change_id(self) -> str:
        return "0-0"

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[JobRecord]:
        return [r for r in self.records.values() if states is None or r.state in states]

    def read_changes(self, cursor: str) -> list[tuple[str, str, str]]:
        out, self.changes = self.changes, []
        return out

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        return {j: self.records[j] for j in job_ids if j in self.records}


def record(job_id: str, state: JobState, kind: bool = False, checkpoints: bool = False) -> JobRecord:
    request = JobRequest(
        job_id,
        gpus_per_pod=1,
        workload=JOBSET if kind else None,
        checkpoint_grace_seconds=30 if checkpoints else None,
    )
    return JobRecord(id=job_id, request=request, state=state, cluster="a" if state in PLACED_STATES else None)


def test_of_kinds_holds_only_the_workload_kinds_in_the_states_asked() -> None:
    store = Store(
        [
            record("job-1", JobState.RUNNING),
            record("set-1", JobState.RUNNING, kind=True),
            record("set-2", JobState.QUEUED, kind=True),
            record("job-2", JobState.PLACED),
        ]
    )
    records = JobRecords(store)  # type: ignore[arg-type]
    records.ensure()
    assert [r.id for r in records.of_kinds(PLACED_STATES)] == ["set-1"]
    assert sorted(r.id for r in records.of_kinds([JobState.QUEUED, JobState.RUNNING])) == ["set-1", "set-2"]


def test_of_kinds_follows_writes_catch_up_and_invalidation() -> None:
    store = Store([record("set-1", JobState.QUEUED, kind=True), record("job-1", JobState.RUNNING)])
    records = JobRecords(store)  # type: ignore[arg-type]
    records.ensure()
    assert records.of_kinds(PLACED_STATES) == []
    placed = replace(store.records["set-1"], state=JobState.PLACED, cluster="a")
    records.put(placed)  # this leader's write
    assert records.of_kinds(PLACED_STATES) == [placed]
    store.records["set-1"] = replace(placed, state=JobState.SUCCEEDED)  # another writer's, then caught up
    store.changes = [("1-0", "set-1", "other")]
    records.ensure()
    assert records.of_kinds(PLACED_STATES) == []
    store.records["set-2"] = record("set-2", JobState.RUNNING, kind=True)
    store.changes = [("2-0", "set-2", "other")]
    records.ensure()
    assert [r.id for r in records.of_kinds(PLACED_STATES)] == ["set-2"]
    del store.records["set-2"]  # gone from the store (read again: None)
    store.changes = [("3-0", "set-2", "other")]
    records.ensure()
    assert records.of_kinds(PLACED_STATES) == []
    store.records["set-3"] = record("set-3", JobState.RUNNING, kind=True)
    records.invalidate()
    assert records.of_kinds(PLACED_STATES) == []
    records.ensure()  # rebuilt from the store
    assert [r.id for r in records.of_kinds(PLACED_STATES)] == ["set-3"]


def test_checkpointing_holds_the_active_jobs_that_checkpoint_through_writes_and_rebuilds() -> None:
    store = Store(
        [
            record("job-1", JobState.RUNNING),
            record("ckpt-1", JobState.RUNNING, checkpoints=True),
            record("ckpt-2", JobState.QUEUED, checkpoints=True),
        ]
    )
    records = JobRecords(store)  # type: ignore[arg-type]
    records.ensure()
    assert [r.id for r in records.checkpointing([JobState.RUNNING])] == ["ckpt-1"]
    placed = replace(store.records["ckpt-2"], state=JobState.RUNNING, cluster="a")
    records.put(placed)  # this leader's write
    assert sorted(r.id for r in records.checkpointing([JobState.RUNNING])) == ["ckpt-1", "ckpt-2"]
    records.put(replace(placed, state=JobState.SUCCEEDED))  # ended: out of the index
    store.records["ckpt-1"] = replace(store.records["ckpt-1"], state=JobState.CANCELLED)  # another writer
    store.changes = [("1-0", "ckpt-1", "other")]
    records.ensure()
    assert records.checkpointing([JobState.RUNNING]) == []
    store.records["ckpt-3"] = record("ckpt-3", JobState.RUNNING, checkpoints=True)
    records.invalidate()
    assert records.checkpointing([JobState.RUNNING]) == []
    records.ensure()  # rebuilt from the store
    assert [r.id for r in records.checkpointing([JobState.RUNNING])] == ["ckpt-3"]


class Watching:
    """A gateway that answers MemberWatch."""

    def member_trouble(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return MemberTrouble()

    def last_termination(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return MemberTrouble()


class Plain:
    """A gateway that does not."""


def test_member_watch_is_asked_once_per_gateway_and_again_when_it_changes() -> None:
    troubles = MemberTroubles()
    watching = Watching()
    troubles.gateway = watching  # type: ignore[assignment]
    assert troubles._member_watch() is watching
    assert troubles._member_watch_of is not None and troubles._member_watch_of[0] is watching
    troubles.gateway = Plain()  # type: ignore[assignment]
    assert troubles._member_watch() is None
    troubles.gateway = watching  # type: ignore[assignment]
    assert troubles._member_watch() is watching


class Telling:
    """A MemberWatch gateway whose pods report `trouble` for every Job."""

    def __init__(self, trouble: PodTrouble | None) -> None:
        self.trouble = trouble

    def member_trouble(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return MemberTrouble(self.trouble)

    def last_termination(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return MemberTrouble(self.trouble)


PENDING = PodTrouble("Unschedulable", "0/1 nodes are available", "p-0")


@pytest.mark.parametrize(
    ("gateway", "remembered", "reason", "quiet"),
    [
        (Telling(None), False, "running on a (1 pod(s) ready)", True),  # a resync's every calm job
        (Plain(), False, "running on a (1 pod(s) ready)", True),  # no member watch: nothing to say
        (Telling(PENDING), False, "running on a (1 pod(s) ready)", False),  # trouble to note
        (Telling(None), True, "running on a (1 pod(s) ready)", False),  # remembered: forget it
        (Telling(None), False, f"{TROUBLE_PREFIX}a: Unschedulable", False),  # it cleared: say so
    ],
)
def test_a_job_is_quiet_only_when_the_member_step_would_do_nothing(
    gateway: object, remembered: bool, reason: str, quiet: bool
) -> None:
    troubles = MemberTroubles()
    troubles.gateway = gateway  # type: ignore[assignment]
    troubles._troubles = TroubleMemory()
    job = replace(record("job-1", JobState.RUNNING), workload_name="gf-job-1-0", reason=reason)
    if remembered:
        troubles._troubles.seen(job.id, job.attempt, PENDING, 0.0)
    assert troubles._member_quiet(job, "default") is quiet
    assert troubles._troubles.holds(job.id) is remembered
    troubles._troubles.forget(job.id)
    assert not troubles._troubles.holds(job.id)
