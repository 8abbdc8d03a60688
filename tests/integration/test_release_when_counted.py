"""A running job's reservation goes only once its cluster's summary counts its pods (real Redis).

The Job's status (followed by watch) reaches the broker sooner than the pods reach the pollers'
summary; releasing the reservation at once would show the job's GPUs free twice and let the next pass
place another job on them (a pod Pending "Insufficient nvidia.com/gpu").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobRequest, JobState
from tests.integration.test_scheduling_pass import cluster
from tests.service_doubles import NOW, ManualClock, RecordingGateway, pods_ready

pytestmark = pytest.mark.integration


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="settle" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def test_the_reservation_of_a_running_job_goes_once_a_newer_summary_counts_it(
    store: RedisStateStore,
) -> None:
    clock = ManualClock()
    store.put_summary(cluster("a", 8))
    svc = BrokerService(store, RecordingGateway(reads=pods_ready(1)), clock, {"a": ClusterTraits("a")})
    first, _ = svc.submit(JobRequest("first", gpus_per_pod=8))
    clock.t += 0.001  # first come, first served
    second, _ = svc.submit(JobRequest("second", gpus_per_pod=8))
    svc.schedule_once()
    assert svc.get(first.id).state is JobState.PLACED

    svc.sync_status()  # pods ready: RUNNING, but the summary in the store predates them
    assert svc.get(first.id).state is JobState.RUNNING
    svc.schedule_once()
    assert svc.get(second.id).state is JobState.QUEUED, "the GPUs of the first job are not free twice"
    assert [r.job_id for r in store.live_reservations(clock.t)] == [first.id]

    clock.t += 1
    store.put_summary(replace(cluster("a", 0), heartbeat=NOW + 1))  # the pollers now count its pods
    svc.sync_status()
    assert store.live_reservations(clock.t) == []
    svc.schedule_once()
    assert svc.get(second.id).state is JobState.QUEUED  # the summary says the node is full
