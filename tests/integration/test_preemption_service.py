"""Preemption in scheduling passes over real Redis with a fake clock: a production job that fits nowhere
evicts the lower-priority job that loses the least work, the victim is requeued under its failover policy
with the reason, both sides get an event, and the storm limit holds the next preemption back. The member
cluster is a summary in the store and a gateway that runs what it is asked to create."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_store import RedisStateStore
from broker import telemetry
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    FailoverPolicy,
    Health,
    JobRequest,
    JobState,
    ProductCapacity,
)
from broker.queue import queueing
from broker.scheduler.preemption import PreemptionPolicy
from broker.workload.manifest import workload_name
from tests.service_doubles import NOW, ManualClock, RecordingGateway, pods_ready

pytestmark = pytest.mark.integration

HOUR = 3600.0


def h100(free: int) -> ClusterSummary:
    """Two 8-GPU H100 nodes, `free` GPUs free (8 per node: 16, 8 or 0)."""
    by_free = [0] * 9
    by_free[8] = free // 8
    by_free[0] = 2 - free // 8
    return ClusterSummary(
        cluster="onprem-b",
        health=Health.HEALTHY,
        heartbeat=NOW + 10 * HOUR,  # fresh for the whole test
        products=(
            ProductCapacity("H100-80GB", 81559, 16, 16, 16 - free, free, tuple(by_free), tuple(by_free), 2),
        ),
    )


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="preempt" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def test_a_production_job_preempts_the_cheapest_victim_which_requeues_and_the_storm_limit_holds(
    store: RedisStateStore,
) -> None:
    clock, gateway = ManualClock(), RecordingGateway(reads=pods_ready(8, only_live=True))
    settings = ServiceSettings(
        queue=queueing.QueuePolicy(priorities={"production": 100000, "batch": 0}),
        preemption=PreemptionPolicy(frozenset({"production"}), max_per_tenant=1, max_global=5),
    )
    service = BrokerService(store, gateway, clock, {"onprem-b": ClusterTraits("onprem-b")}, settings=settings)
    store.put_summary(h100(16))

    def low(name: str, failover: FailoverPolicy = FailoverPolicy.REQUEUE) -> str:
        request = JobRequest(name, tenant="cv", gpus_per_pod=8, priority_class="batch", failover=failover)
        job_id = service.submit(request)[0].id
        service.schedule_once()
        service.sync_status()
        assert service.get(job_id).state is JobState.RUNNING
        return job_id

    old = low("old")
    clock.t += 2 * HOUR
    young = low("young")
    store.put_summary(h100(0))  # the cluster now counts both jobs' pods
    clock.t += HOUR

    def metric(name: str, **labels: str) -> float:
        return telemetry.REGISTRY.get_sample_value(name, labels) or 0.0

    evicted, held_back = (
        metric("gpufed_preemptions_total", cluster="onprem-b"),
        metric("gpufed_preemptions_held_total"),
    )
    urgent = service.submit(JobRequest("urgent", tenant="ml", gpus_per_pod=8, priority_class="production"))[0]
    service.schedule_once()
    victim = service.get(young)
    assert victim.state is JobState.QUEUED and victim.attempt == 1
    assert victim.reason == (
        f"preempted by {urgent.id} (priority 100000) to free 8 H100-80GB on onprem-b; "
        "requeued (attempt 1 abandoned)"
    )
    assert service.get(old).state is JobState.RUNNING  # 3 GPU-hours x 8 would be lost there, 1 x 8 here
    assert gateway.deleted == [workload_name(young, 1)]  # its Job deleted in the member cluster
    events = [e.reason for e in service.events(urgent.id)]
    assert any(
        r.startswith("preempting 1 job(s) on onprem-b to free 8 H100-80GB") and young in r for r in events
    )

    # the storm limit: ml may preempt one job per window, so a second urgent job waits with the reason
    clock.t += 1  # younger than the first urgent job: behind it in the queue
    second_request = JobRequest("urgent-2", tenant="ml", gpus_per_pod=8, priority_class="production")
    second = service.submit(second_request)[0]
    service.schedule_once()
    held = service.get(second.id)
    assert held.state is JobState.QUEUED and service.get(old).state is JobState.RUNNING
    assert (
        "preemption held back: tenant ml preempted 1 job(s) in the last 600 s (limit 1), this needs 1 more"
        in (held.reason)
    )

    assert metric("gpufed_preemptions_total", cluster="onprem-b") == evicted + 1
    assert metric("gpufed_preemptions_held_total") >= held_back + 1

    # the victim's GPUs come free: the urgent job goes first (its priority), the victim waits its turn
    store.put_summary(h100(8))
    clock.t += 1
    service.schedule_once()
    assert service.get(urgent.id).state is JobState.PLACED
    assert service.get(young).state is JobState.QUEUED


def test_a_victim_whose_failover_policy_is_never_fails_with_the_reason(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), RecordingGateway(reads=pods_ready(8, only_live=True))
    settings = ServiceSettings(
        queue=queueing.QueuePolicy(priorities={"production": 100000, "batch": 0}),
        preemption=PreemptionPolicy(frozenset({"production"})),
    )
    service = BrokerService(store, gateway, clock, {"onprem-b": ClusterTraits("onprem-b")}, settings=settings)
    store.put_summary(h100(16))
    request = JobRequest(
        "fill", tenant="cv", gpus_per_pod=8, pods=2, priority_class="batch", failover=FailoverPolicy.NEVER
    )
    fill = service.submit(request)[0].id
    service.schedule_once()
    service.sync_status()
    store.put_summary(h100(0))
    clock.t += 60
    urgent = service.submit(JobRequest("urgent", tenant="ml", gpus_per_pod=8, priority_class="production"))[0]
    service.schedule_once()
    victim = service.get(fill)
    assert victim.state is JobState.FAILED
    assert victim.reason == (
        f"preempted by {urgent.id} (priority 100000) to free 16 H100-80GB on onprem-b (failover: never)"
    )
