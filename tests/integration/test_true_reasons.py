"""What a queued job is told is true (issue 45): a drained cluster named as drained with the operator's
reason, reasons recomputed when a cluster's state changes, and `explain` agreeing with the job's own
reason and with the queue. The service over real Redis with a fake clock, the API in-process."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.redis_burst import RedisBurstLedger
from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.burst.gate import BurstGate
from broker.burst.settings import BurstSettings
from broker.controller.service import BrokerService
from broker.core.model import ClusterSummary, ClusterTraits, Health, JobRequest, JobState, ProductCapacity
from broker.tenancy.auth import Principal, Role, TokenTable, digest
from tests.service_doubles import NOW, ManualClock, RecordingGateway, pods_ready

pytestmark = pytest.mark.integration

H100 = "H100-80GB"
TRAITS = {"c1": ClusterTraits("c1"), "c2": ClusterTraits("c2")}
TOKENS = {"root": "t-root", "alice": "t-alice"}
PRINCIPALS = {"root": Principal("root", "*", Role.ADMIN), "alice": Principal("alice", "ml", Role.USER)}


def h100(cluster: str, free: int, at: float = NOW, health: Health = Health.HEALTHY) -> ClusterSummary:
    by_free = [0] * 9
    by_free[free] = 1
    return ClusterSummary(
        cluster=cluster,
        health=health,
        heartbeat=at,
        products=(ProductCapacity(H100, 81559, 8, 8, 8 - free, free, tuple(by_free), tuple(by_free), 1),),
    )


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="reasons" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def _call(app: Any, who: str, method: str, path: str, **kw: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
            headers = {"Authorization": f"Bearer {TOKENS[who]}"}
            return await client.request(method, path, headers=headers, **kw)

    return asyncio.run(go())


def _service(store: RedisStateStore) -> tuple[BrokerService, ManualClock, Any]:
    clock = ManualClock()
    gate = BurstGate(RedisBurstLedger(store.client, store.prefix), BurstSettings())  # predicted starts
    svc = BrokerService(
        store, RecordingGateway(reads=pods_ready(1, only_live=True)), clock, TRAITS, burst=gate
    )
    tokens = TokenTable({digest(TOKENS[w]): p for w, p in PRINCIPALS.items()})
    return svc, clock, create_app(svc, clock, tokens=tokens)


def test_a_drained_cluster_is_named_drained_with_the_operators_reason_in_reasons_and_explain(
    store: RedisStateStore,
) -> None:
    svc, _, app = _service(store)
    store.put_summary(h100("c1", 8))
    store.put_summary(h100("c2", 0))
    r = _call(app, "root", "POST", "/v1/clusters/c1/drain", json={"reason": "firmware"})
    assert r.status_code == 200, r.text
    job_id = svc.submit(JobRequest("waits", tenant="ml", gpus_per_pod=8))[0].id
    svc.schedule_once()
    job = _call(app, "alice", "GET", f"/v1/jobs/{job_id}").json()
    assert job["state"] == "QUEUED"
    assert "1 drained by root: firmware" in job["reason"], job["reason"]
    assert "unreachable" not in job["reason"]
    assert job["predictedWait"] == "predicted on-prem start: none while c1 is drained by root: firmware"
    spec = {"name": "probe", "gpus": 8}
    answer = _call(app, "alice", "POST", "/v1/explain", json=spec).json()
    assert answer["message"] == job["reason"]  # one code path: the same clusters, named the same way
    [c1] = [c for c in answer["clusters"] if c["cluster"] == "c1"]
    assert c1["rejection"]["reason"] == "drained by root: firmware"
    assert _call(app, "root", "POST", "/v1/clusters/c1/undrain").status_code == 200
    svc.schedule_once()
    assert svc.get(job_id).state is JobState.PLACED and svc.get(job_id).cluster == "c1"


def test_a_queued_jobs_reason_is_recomputed_when_a_cluster_is_healthy_again(store: RedisStateStore) -> None:
    svc, clock, app = _service(store)
    store.put_summary(h100("c1", 8, health=Health.UNREACHABLE))
    store.put_summary(h100("c2", 4))
    job_id = svc.submit(JobRequest("big", tenant="ml", gpus_per_pod=8, clusters=("c1", "c2")))[0].id
    svc.observe_clusters()
    svc.schedule_once()
    assert "1 unreachable" in svc.get(job_id).reason
    clock.t += 1  # the cluster answers again, still without room for the job
    store.put_summary(h100("c1", 6, at=clock.t))
    svc.observe_clusters()  # healthy again: its stale attempts are swept, then its fence lifted
    svc.schedule_once()
    reason = _call(app, "alice", "GET", f"/v1/jobs/{job_id}").json()["reason"]
    assert "unreachable" not in reason, reason
    svc.observe_clusters()  # the next pass sees the fence lifted: the reason follows at once
    svc.schedule_once()
    reason = _call(app, "alice", "GET", f"/v1/jobs/{job_id}").json()["reason"]
    assert reason == "0/2 clusters are available: 2 no node with 8 free H100-80GB (best: 6 on c1).", reason


def test_explain_behind_a_queued_job_says_it_would_place_once_the_jobs_ahead_are_placed(
    store: RedisStateStore,
) -> None:
    svc, _, app = _service(store)
    store.put_summary(h100("c1", 8))
    store.put_summary(h100("c2", 0))
    spec = {"name": "probe", "gpus": 8}
    first = _call(app, "alice", "POST", "/v1/explain", json=spec).json()
    assert first["placed"] and first["summary"] == "would place on c1 now"
    svc.submit(JobRequest("ahead", tenant="ml", gpus_per_pod=8))  # queued, not yet placed
    answer = _call(app, "alice", "POST", "/v1/explain", json=spec).json()
    assert answer["queue"]["position"] == 2 and answer["queue"]["reason"].startswith("behind 1 job")
    assert answer["summary"] == "would place on c1 once the 1 job ahead of it is placed"
