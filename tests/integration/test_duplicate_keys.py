"""Two live jobs of one Idempotency-Key after a Redis loss: the older is kept (issue 21, case 2).

Real Redis, a service with a recording gateway. A key re-sent while its cluster was declared lost made
job B; the cluster came back and the rebuild restored the original job A (submitted earlier) from its
Job. DuplicateKeys cancels B, points the key at A and says so in both jobs' events; done again (a
reconcile cut short and retried), it changes nothing; a newer job that already ended is left alone.
The process-level scenario is test_rebuild_with_a_member_down.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_recovery_gate import IdempotencyKeys
from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobEvent, JobRecord, JobRequest, JobState
from broker.ha.duplicates import DuplicateKeys
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
