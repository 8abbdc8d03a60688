"""Two live jobs of one Idempotency-Key after a Redis loss: the one that can stay is kept, else the older
(issue 21 case 2, issue 48 finding 7).

Real Redis, a service with a recording gateway. A key re-sent while its cluster was declared lost made
job B; the cluster came back and the rebuild restored the original job A (submitted earlier) from its
Job. DuplicateKeys cancels B, points the key at A and says so in both jobs' events; done again (a
reconcile cut short and retried), it changes nothing; a newer job that already ended is left alone. When
A's cluster is still fenced (A must move) and B runs elsewhere, B is kept and A cancelled: the work does
not start twice.
The process-level scenario is test_rebuild_with_a_member_down.py.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_recovery_gate import IdempotencyKeys
from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobEvent, JobRecord, JobRequest, JobState
from broker.ha.duplicates import DuplicateKeys, keep_which
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture
def service(redis_url: str) -> Iterator[BrokerService]:
    store = RedisStateStore(redis_url, prefix="dupkeys" + uuid.uuid4().hex[:8])
    store.set_run_marker("r1")
    yield BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    keys = list(store.client.scan_iter(match=f"{store.prefix}:*"))
    if keys:
        store.client.delete(*keys)
    store.close()


def _original(service: BrokerService, key: str, at: float) -> JobRecord:
    """The job A a rebuild restores from its Job on the returning cluster (its key names B already)."""
    record = JobRecord(
        id="a" + uuid.uuid4().hex[:8],
        request=JobRequest("train", gpus_per_pod=1),
        state=JobState.PLACED,
        created_at=at,
        updated_at=at,
        cluster="c1",
        workload_name="gf-a-1",
        idempotency_key=key,
    )
    event = JobEvent(record.id, at, record.state, 1, "recovered", "c1")
    assert service.store.restore_jobs([(record, event)]) == [True]  # type: ignore[attr-defined]
    return record


def test_the_older_of_two_live_jobs_of_one_key_is_kept_and_the_newer_cancelled(
    service: BrokerService,
) -> None:
    store = service.store
    newer, created = service.submit(JobRequest("train", gpus_per_pod=1), idempotency_key="k1")
    assert created
    older = _original(service, newer.idempotency_key or "", at=newer.created_at - 60)
    keys = IdempotencyKeys(store.client, store.prefix)  # type: ignore[attr-defined]
    reconciler = DuplicateKeys(store, keys, service.cancel, service.clock)

    assert reconciler.reconcile([older]) == [(older.id, newer.id)]
    cancelled = service.get(newer.id)
    assert (
        cancelled.state is JobState.CANCELLED
        and "duplicate" in cancelled.reason
        and older.id in cancelled.reason
    )
    assert service.get(older.id).state is JobState.PLACED
    kept = [e.reason for e in service.events(older.id)]
    assert any(r.startswith("kept:") and newer.id in r for r in kept), kept
    again, created = service.submit(JobRequest("train", gpus_per_pod=1), idempotency_key="k1")
    assert (again.id, created) == (older.id, False)  # the key names the older job again
    assert reconciler.reconcile([older]) == []  # done again: nothing more to do


def test_a_newer_job_that_already_ended_is_left_alone(service: BrokerService) -> None:
    store = service.store
    newer, _ = service.submit(JobRequest("train", gpus_per_pod=1), idempotency_key="k2")
    service.cancel(newer.id)
    older = _original(service, newer.idempotency_key or "", at=newer.created_at - 60)
    keys = IdempotencyKeys(store.client, store.prefix)  # type: ignore[attr-defined]
    assert DuplicateKeys(store, keys, service.cancel, service.clock).reconcile([older]) == []
    assert service.get(older.id).state is JobState.PLACED


def test_the_newer_job_running_where_it_can_stay_is_kept_when_the_older_must_move(
    service: BrokerService,
) -> None:
    """Issue 48 finding 7: keeping the older regardless cancelled B, already RUNNING on c2, and then
    failed A over from the still-fenced c1: the work restarted twice."""
    store = service.store
    submitted, _ = service.submit(JobRequest("train", gpus_per_pod=1), idempotency_key="k3")
    newer = dataclasses.replace(
        submitted, state=JobState.RUNNING, cluster="c2", attempt=1, workload_name="gf-b-1"
    )
    store.save_job(newer, event=JobEvent(newer.id, 1.0, JobState.RUNNING, 1, "running on c2", "c2"))
    older = _original(service, newer.idempotency_key or "", at=newer.created_at - 60)
    store.fence("c1", "lost: no answer for 4 s")
    keys = IdempotencyKeys(store.client, store.prefix)  # type: ignore[attr-defined]
    reconciler = DuplicateKeys(store, keys, service.cancel, service.clock)

    assert reconciler.reconcile([older]) == [(newer.id, older.id)]
    assert service.get(newer.id).state is JobState.RUNNING and service.get(newer.id).attempt == 1
    cancelled = service.get(older.id)
    assert cancelled.state is JobState.CANCELLED and newer.id in cancelled.reason, cancelled.reason
    again, created = service.submit(JobRequest("train", gpus_per_pod=1), idempotency_key="k3")
    assert (again.id, created) == (newer.id, False)  # the key names the job that runs
    assert any(e.reason.startswith("kept:") for e in service.events(newer.id))


def _job(name: str, state: JobState, cluster: str | None, at: float) -> JobRecord:
    return JobRecord(id=name, request=JobRequest("t"), state=state, created_at=at, cluster=cluster)


@pytest.mark.parametrize(
    ("a", "b", "fenced", "kept"),
    [
        (("A", JobState.RUNNING, "c1", 1.0), ("B", JobState.RUNNING, "c2", 2.0), set(), "A"),
        (("A", JobState.RUNNING, "c1", 1.0), ("B", JobState.RUNNING, "c2", 2.0), {"c1"}, "B"),
        (("A", JobState.PLACED, "c1", 1.0), ("B", JobState.QUEUED, None, 2.0), set(), "A"),
        (("A", JobState.PLACED, "c1", 1.0), ("B", JobState.RUNNING, "c2", 2.0), set(), "B"),
        (("A", JobState.RUNNING, "c1", 1.0), ("B", JobState.QUEUED, None, 2.0), {"c1"}, "A"),
    ],
    ids=["both stay: older", "older must move", "newer not placed", "newer running", "neither stays: older"],
)
def test_which_job_of_a_key_is_kept(
    a: tuple[str, JobState, str | None, float],
    b: tuple[str, JobState, str | None, float],
    fenced: set[str],
    kept: str,
) -> None:
    first, second = _job(*a), _job(*b)
    assert keep_which(first, second, fenced)[0].id == kept
    assert keep_which(second, first, fenced)[0].id == kept
