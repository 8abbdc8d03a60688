"""Undrain gives back what drain took: a job drain moved off the only cluster that can hold it is placed
there again once that cluster is undrained (the drain's "anywhere but here" ends with the drain), and
its events say the drain in plain words. In-process service on real Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobRequest, JobState
from tests.conftest import wait_for
from tests.integration.test_tenancy import h100_cluster
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="undrain" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def test_a_job_drained_off_its_only_cluster_goes_back_once_it_is_undrained(store: RedisStateStore) -> None:
    clock = ManualClock()
    traits = {"c1": ClusterTraits("c1"), "c2": ClusterTraits("c2")}
    service = BrokerService(store, RecordingGateway(), clock, traits)
    store.put_summary(h100_cluster("c1", 1))  # only c1 has H100s; c2 has nothing the job can use
    record, _ = service.submit(JobRequest(name="a", tenant="t", gpus_per_pod=2, gpu_products=("H100-80GB",)))
    service.schedule_once()
    assert service.get(record.id).cluster == "c1"

    service.drain_cluster("c1", reason="", by="ops")
    wait_for(lambda: service.get(record.id).state is JobState.QUEUED, timeout=30, what="moved off c1")
    assert service.events(record.id)[-1].reason.startswith("cluster c1 drained by ops; ")

    assert service.undrain_cluster("c1")

    def placed_again() -> bool:
        service.schedule_once()
        return service.get(record.id).state is JobState.PLACED

    wait_for(placed_again, timeout=30, what="placed on c1 again once undrained")
    assert service.get(record.id).cluster == "c1"
