"""Wait-or-burst and spend in scheduling passes, on real Redis (docs/burst.md).

The service runs over the Redis store and the Redis burst ledger with a manual clock; member clusters are
not the subject, so the gateway records the Jobs it is asked to create and reports what the test says
(the failover suite covers a spot interruption through kubesim: tests/integration/test_failover.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.redis_burst import RedisBurstLedger
from adapters.redis_store import RedisStateStore
from broker import telemetry
from broker.api.routes import create_app
from broker.burst.gate import BurstGate
from broker.burst.settings import BurstSettings, PoolSettings, TenantBurst
from broker.burst.spend import Budget, Period
from broker.config.settings import load_tokens
from broker.controller.service import BrokerService
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    JobState,
    ProductCapacity,
    Tier,
)
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import NOW, ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

H100 = "H100-80GB"
PRICE = 4.25


def h100(name: str, free: int, tier: Tier = Tier.ONPREM, total: int = 8, at: float = NOW) -> ClusterSummary:
    by_free = (0,) * free + (1,)
    return ClusterSummary(
        cluster=name,
        tier=tier,
        health=Health.HEALTHY,
        heartbeat=at,
        products=(ProductCapacity(H100, 81559, total, total, total - free, free, by_free, by_free, 1),),
        price_per_gpu_hour={H100: PRICE} if tier is Tier.CLOUD else {},
    )


TRAITS = {
    "op": ClusterTraits("op"),
    "cloud": ClusterTraits("cloud", tier=Tier.CLOUD, price_per_gpu_hour={H100: PRICE}),
}


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="burst" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def service(
    store: RedisStateStore,
    settings: BurstSettings,
    clock: ManualClock,
    gateway: RecordingGateway,
    traits: Mapping[str, ClusterTraits] = TRAITS,
) -> BrokerService:
    gate = BurstGate(RedisBurstLedger(store.client, store.prefix), settings)
    return BrokerService(store, gateway, clock, traits, burst=gate)


def job(name: str, **kw: Any) -> JobRequest:
    return JobRequest(name=name, tenant="ml", gpus_per_pod=8, **kw)


def fill_on_prem(svc: BrokerService, store: RedisStateStore, run_seconds: float) -> str:
    """One 8-GPU job placed on op, which is then full; returns its id."""
    store.put_summary(h100("op", 8))
    store.put_summary(h100("cloud", 8, Tier.CLOUD))
    first, _ = svc.submit(job("first", duration_seconds=run_seconds))
    svc.schedule_once()
    assert svc.get(first.id).cluster == "op"
    store.put_summary(h100("op", 0))
    return first.id


def reasons(svc: BrokerService, job_id: str) -> list[str]:
    return [e.reason for e in svc.events(job_id)]


def scraped(name: str, **labels: str) -> float:
    """A series as /metrics shows it now (the registry is the process's: compare before and after)."""
    return telemetry.REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_short_predicted_wait_waits_and_a_long_one_bursts_with_its_numbers(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    svc = service(store, BurstSettings(max_wait_seconds=600), clock, gw)
    fill_on_prem(svc, store, run_seconds=300)  # op frees up in 5 min
    waits_before = scraped("gpufed_burst_decisions_total", verdict="wait")
    bursts_before = scraped("gpufed_burst_decisions_total", verdict="burst")
    patient, _ = svc.submit(job("patient", allow_burst=True, duration_seconds=3600))
    clock.t = NOW + 1  # queued after `patient`
    hasty, _ = svc.submit(job("hasty", allow_burst=True, max_wait_seconds=120.0, duration_seconds=1440))
    svc.schedule_once()

    waiting = svc.get(patient.id)
    assert waiting.state is JobState.QUEUED
    assert waiting.reason == "wait: predicted on-prem wait 5 min <= 10 min"
    assert waiting.reason in reasons(svc, patient.id)

    burst = svc.get(hasty.id)
    assert (burst.state, burst.cluster) == (JobState.PLACED, "cloud")
    # behind `patient` (1 h) after `first` (5 min): 65 min; 8 x $4.25 x 24 min = $13.60
    assert (
        "burst: predicted on-prem wait 65 min > 2 min; est. cost $13.60 (no budget set) on cloud"
        in reasons(svc, hasty.id)
    )
    # the operator sees one decision of each kind
    assert scraped("gpufed_burst_decisions_total", verdict="wait") == waits_before + 1
    assert scraped("gpufed_burst_decisions_total", verdict="burst") == bursts_before + 1


def test_hysteresis_one_event_per_change_of_verdict(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    svc = service(store, BurstSettings(max_wait_seconds=600), clock, gw)
    fill_on_prem(svc, store, run_seconds=300)
    patient, _ = svc.submit(job("patient", allow_burst=True))
    for step in range(3):  # the prediction shrinks as time passes: still wait, and one event only
        clock.t = NOW + 10 * step
        store.put_summary(h100("op", 0))  # the cache changed: the job is decided again
        svc.schedule_once()
    waits = [r for r in reasons(svc, patient.id) if r.startswith("wait:")]
    assert len(waits) == 1, reasons(svc, patient.id)
    assert svc.get(patient.id).state is JobState.QUEUED


def test_a_tenant_over_budget_gets_no_burst_and_is_told_why(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    settings = BurstSettings(
        max_wait_seconds=0, tenants={"ml": TenantBurst(budget=Budget(10.0, Period.MONTH))}
    )
    svc = service(store, settings, clock, gw)
    fill_on_prem(svc, store, run_seconds=3600)
    hasty, _ = svc.submit(job("hasty", allow_burst=True, duration_seconds=1440))
    svc.schedule_once()
    record = svc.get(hasty.id)
    assert record.state is JobState.QUEUED
    assert record.reason == (
        "wait: predicted on-prem wait 60 min > 0 s, but over budget: est. cost $13.60 > $10.00 left"
    )


def test_bursts_in_one_pass_share_the_budget(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    settings = BurstSettings(tenants={"ml": TenantBurst(budget=Budget(20.0, Period.MONTH))})
    svc = service(store, settings, clock, gw)
    fill_on_prem(svc, store, run_seconds=3600)
    store.put_summary(h100("cloud", 16, Tier.CLOUD, total=16))  # room for both
    one, _ = svc.submit(job("one", allow_burst=True, duration_seconds=1440))
    clock.t = NOW + 1
    two, _ = svc.submit(job("two", allow_burst=True, duration_seconds=1440))
    svc.schedule_once()
    assert svc.get(one.id).cluster == "cloud"  # $13.60 of $20.00
    held = svc.get(two.id)
    assert held.state is JobState.QUEUED
    assert held.reason.endswith("but over budget: est. cost $13.60 > $6.40 left")


def test_spend_is_price_times_gpus_times_run_time_and_counted_once(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    svc = service(store, BurstSettings(), clock, gw)
    fill_on_prem(svc, store, run_seconds=3600)
    dollars_before = scraped("gpufed_cloud_spend_dollars_total", tenant="ml", cluster="cloud")
    gpu_seconds_before = scraped("gpufed_cloud_gpu_seconds_total", tenant="ml", cluster="cloud")
    burst, _ = svc.submit(job("burst", allow_burst=True))
    svc.schedule_once()
    name = svc.get(burst.id).workload_name
    assert name is not None and svc.get(burst.id).cluster == "cloud"
    gw.status[name] = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
    clock.t = NOW + 60
    store.put_summary(h100("cloud", 0, Tier.CLOUD, at=clock.t))
    svc.sync_status()
    assert svc.get(burst.id).state is JobState.RUNNING
    gw.status[name] = WorkloadStatus(name=name, namespace="default", exists=True, succeeded=1, complete=True)
    clock.t = NOW + 60 + 1800
    store.put_summary(h100("cloud", 0, Tier.CLOUD, at=clock.t))
    svc.sync_status()
    svc.sync_status()
    assert svc.get(burst.id).state is JobState.SUCCEEDED

    assert svc.burst is not None
    runs = svc.burst.ledger.runs(0)
    assert [(r.job_id, r.gpus, r.seconds) for r in runs] == [(burst.id, 8, 1800.0)]
    assert runs[0].cost == pytest.approx(PRICE * 8 * 0.5)
    svc.burst.begin_pass(clock.t, [], list, [])
    assert svc.burst.spend(TRAITS)["ml"].spent == pytest.approx(17.0)
    # and /metrics counts the same dollars and GPU-seconds, once
    spent = scraped("gpufed_cloud_spend_dollars_total", tenant="ml", cluster="cloud") - dollars_before
    assert spent == pytest.approx(17.0)
    gpu_seconds = scraped("gpufed_cloud_gpu_seconds_total", tenant="ml", cluster="cloud") - gpu_seconds_before
    assert gpu_seconds == pytest.approx(8 * 1800.0)
    # its run time is now a sample of its shape: the next job of that shape is predicted from it
    assert svc.burst.ledger.run_times() == {"ml/H100-80GB/8x1": [1800.0]}


@pytest.mark.parametrize(
    ("hard", "ready"),
    [(True, 1), (False, 1), (True, 0)],  # ready 0: its pod seen starting (ADMITTED), paid for from then too
)
def test_a_hard_budget_stops_and_requeues_a_cloud_run_that_overruns_it(
    store: RedisStateStore, hard: bool, ready: int
) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    budget = Budget(20.0, Period.MONTH, hard=hard)
    svc = service(store, BurstSettings(tenants={"ml": TenantBurst(budget=budget)}), clock, gw)
    fill_on_prem(svc, store, run_seconds=36000)
    stops_before = scraped("gpufed_budget_stops_total", tenant="ml")
    # expected: 8 x $4.25 x 24 min = $13.60, within the $20; it will run far longer
    job_id = svc.submit(job("long", allow_burst=True, duration_seconds=1440))[0].id
    svc.schedule_once()
    name = svc.get(job_id).workload_name
    assert name is not None and svc.get(job_id).cluster == "cloud"
    gw.status[name] = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=ready)
    clock.t = NOW + 60
    store.put_summary(h100("cloud", 0, Tier.CLOUD, at=clock.t))
    svc.sync_status()
    seen = JobState.RUNNING if ready else JobState.ADMITTED
    assert svc.get(job_id).state is seen

    clock.t = NOW + 60 + 1800  # $17.00 run up: under the budget
    assert svc.enforce_budgets() == [] and svc.get(job_id).state is seen

    clock.t = NOW + 60 + 2160  # $20.40 run up: the budget is spent
    moved = svc.enforce_budgets()
    if not hard:  # a soft budget refuses new bursts only: the run goes on
        assert moved == [] and svc.get(job_id).state is JobState.RUNNING and gw.deleted == []
        return
    assert [r.id for r in moved] == [job_id]
    stopped = svc.get(job_id)
    assert stopped.state is JobState.QUEUED and stopped.cluster is None
    assert stopped.reason == (
        "hard budget: tenant ml has spent $20.40 of $20.00 this month; its cloud run stopped; "
        "requeued (attempt 1 abandoned)"
    )
    assert gw.deleted == [name]
    assert svc.burst is not None
    [paid] = svc.burst.ledger.runs(0)
    assert (paid.job_id, paid.seconds) == (job_id, 2160.0) and paid.cost == pytest.approx(20.4)
    assert scraped("gpufed_budget_stops_total", tenant="ml") == stops_before + 1
    # back in the queue it waits for on-prem, though the cloud has room again: no burst over the budget
    store.put_summary(h100("op", 0, at=clock.t))
    store.put_summary(h100("cloud", 8, Tier.CLOUD, at=clock.t))
    svc.schedule_once()
    waiting = svc.get(job_id)
    assert waiting.state is JobState.QUEUED and "over budget" in waiting.reason, waiting.reason


def test_a_run_on_a_lost_cloud_cluster_is_paid_for_up_to_the_loss(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    svc = service(store, BurstSettings(), clock, gw)
    fill_on_prem(svc, store, run_seconds=36000)
    job_id = svc.submit(job("burst", allow_burst=True))[0].id
    svc.schedule_once()
    name = svc.get(job_id).workload_name
    assert name is not None and svc.get(job_id).cluster == "cloud"
    gw.status[name] = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
    clock.t = NOW + 60
    store.put_summary(h100("cloud", 0, Tier.CLOUD, at=clock.t))
    svc.sync_status()
    assert svc.get(job_id).state is JobState.RUNNING

    # the cloud cluster stops answering; found lost 30 min after the job started running
    clock.t = NOW + 60 + 1800
    store.put_summary(
        dataclasses.replace(h100("cloud", 0, Tier.CLOUD, at=NOW + 60), health=Health.UNREACHABLE)
    )
    store.put_summary(h100("op", 0, at=clock.t))
    moved = svc.observe_clusters()
    assert [r.id for r in moved] == [job_id] and svc.get(job_id).state is JobState.QUEUED
    assert svc.burst is not None
    [paid] = svc.burst.ledger.runs(0)
    assert (paid.job_id, paid.attempt, paid.seconds) == (job_id, 1, 1800.0)
    assert paid.cost == pytest.approx(PRICE * 8 * 0.5)


@pytest.mark.parametrize(
    "disruption",
    ["DisruptionTarget: DeletionByPodGC", "DisruptionTarget: PreemptionByScheduler"],
    ids=["spot-reclaimed", "preempted"],
)
def test_a_spot_reclaimed_or_preempted_attempt_is_paid_for_and_the_job_requeues(
    store: RedisStateStore, disruption: str
) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    svc = service(store, BurstSettings(), clock, gw)
    fill_on_prem(svc, store, run_seconds=3600)
    burst, _ = svc.submit(job("burst", allow_burst=True))
    svc.schedule_once()
    name = svc.get(burst.id).workload_name
    assert name is not None
    gw.status[name] = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
    clock.t = NOW + 10
    store.put_summary(h100("cloud", 0, Tier.CLOUD, at=clock.t))
    svc.sync_status()
    reclaimed = WorkloadStatus(
        name=name,
        namespace="default",
        exists=True,
        failed=1,
        failed_terminal=True,
        disrupted=True,
        message=disruption,
    )
    gw.status[name] = reclaimed
    clock.t = NOW + 10 + 900
    store.put_summary(h100("cloud", 8, Tier.CLOUD, at=clock.t))
    svc.sync_status()

    back = svc.get(burst.id)
    assert (back.state, back.attempt) == (JobState.QUEUED, 1)  # the failover policy's requeue
    assert svc.burst is not None
    (run,) = svc.burst.ledger.runs(0)
    assert (run.attempt, run.seconds) == (1, 900.0)
    assert run.cost == pytest.approx(PRICE * 8 * 0.25)
    assert svc.burst.ledger.run_times() == {}  # an interrupted run says nothing about the shape's run time


def test_a_pool_at_zero_nodes_takes_one_burst_per_node_it_can_add(store: RedisStateStore) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    traits = {
        "op": ClusterTraits("op"),
        "pool": ClusterTraits("pool", tier=Tier.CLOUD, price_per_gpu_hour={"L4": 0.85}),
    }
    pools = {"pool": PoolSettings(provisioning_delay_seconds=120, max_nodes=1, gpus_per_node=8, product="L4")}
    svc = service(store, BurstSettings(pools=pools), clock, gw, traits)
    store.put_summary(h100("op", 8))
    store.put_summary(ClusterSummary("pool", tier=Tier.CLOUD, health=Health.HEALTHY, heartbeat=NOW))
    svc.submit(job("first", duration_seconds=3600))
    svc.schedule_once()
    store.put_summary(h100("op", 0))
    one, _ = svc.submit(job("one", allow_burst=True, duration_seconds=1800))
    clock.t = NOW + 1
    two, _ = svc.submit(job("two", allow_burst=True, duration_seconds=1800))
    svc.schedule_once()

    placed = svc.get(one.id)
    assert (placed.state, placed.cluster) == (JobState.PLACED, "pool")
    assert placed.placement is not None and placed.placement.product == "L4"
    # 8 x $0.85 x (30 min + 2 min booting) = $3.63
    assert any(
        r.endswith("est. cost $3.63 (no budget set) on pool (after 2 min scale-up)")
        for r in reasons(svc, one.id)
    ), reasons(svc, one.id)
    # the one node the pool may add is promised to `one`: `two` is not placed on it as well
    assert svc.get(two.id).state is JobState.QUEUED
    # and `one` keeps its GPUs while its node boots (reservation TTL + provisioning delay)
    held = store.cluster_states(["pool"])["pool"].reservations
    assert [(r.job_id, r.expires_at - r.created_at) for r in held] == [(one.id, 120.0 + 120.0)]


# --------------------------------------------------------------------------- through the API


def call(app: Any, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
            return await client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kw)

    return asyncio.run(go())


def test_get_explain_and_spend_show_the_prediction_and_each_tenants_own_spend(
    store: RedisStateStore, tmp_path: Path
) -> None:
    clock, gw = ManualClock(), RecordingGateway()
    settings = BurstSettings(max_wait_seconds=600, tenants={"ml": TenantBurst(budget=Budget(200.0))})
    svc = service(store, settings, clock, gw)
    fill_on_prem(svc, store, run_seconds=300)
    tokens = tmp_path / "tokens.yaml"
    entries = [
        {"name": "alice", "tenant": "ml", "role": "user", "token": "alice-token-0123456789"},
        {"name": "bob", "tenant": "cv", "role": "user", "token": "bob-token-0123456789ab"},
    ]
    tokens.write_text(yaml.safe_dump(entries))
    app = create_app(svc, clock, tokens=load_tokens(tokens))
    alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"

    r = call(app, alice, "POST", "/v1/jobs", json={"name": "wait-me", "gpus": 8, "allowBurst": True})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    body = call(app, alice, "GET", f"/v1/jobs/{job_id}").json()
    assert body["predictedWaitSeconds"] == 300
    assert body["predictedWait"].startswith("predicted on-prem start in 5 min on op (H100-80GB)")
    assert body["request"]["maxWaitSeconds"] is None

    explained = call(app, alice, "POST", "/v1/explain", json={"name": "probe", "gpus": 8}).json()
    # behind `wait-me` (1 h by default: no runs of its shape yet), after `first` (5 min)
    assert explained["predictedWaitSeconds"] == 300 + 3600
    assert "after 1 job ahead" in explained["predictedWait"]

    assert (
        call(app, alice, "POST", "/v1/jobs", json={"name": "x", "gpus": 1, "maxWaitSeconds": -1}).status_code
        == 422
    )

    spend = call(app, alice, "GET", "/v1/spend").json()["items"]
    assert spend == [
        {
            "tenant": "ml",
            "periodStart": spend[0]["periodStart"],
            "period": "month",
            "spent": 0.0,
            "gpuHours": 0.0,
            "runs": 0,
            "committed": 0.0,
            "budget": 200.0,
            "hardBudget": False,
            "left": 200.0,
            "overBudget": False,
            "avoided": 0.0,
            "movedBack": 0,
        }
    ]
    assert call(app, bob, "GET", "/v1/spend").json()["items"] == []  # another tenant's spend is not shown
