"""Never-fit at submit, through the API on a real Redis: a job no declared cluster could hold even empty
is accepted (clusters may join), and the answer and the stored job carry the warning; a job that fits
carries none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from adapters.kube import KubeGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.api.routes import create_app
from broker.capacity.kube_objects import node_facts
from broker.capacity.rollup import summarize
from broker.controller.service import BrokerService
from broker.core.model import ClusterSnapshot, ClusterSummary, ClusterTraits, Health, ProductCapacity

pytestmark = pytest.mark.integration

PREFIX = "gpufed-never-fit"


@pytest.fixture
def service(redis_url: str) -> Iterator[BrokerService]:
    store = RedisStateStore(redis_url, prefix=PREFIX)
    svc = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
    cap = ProductCapacity("H100-80GB", 81920, 16, 16, 0, 16, (0,) * 8 + (2,), nodes=2, whole_gpus=16)
    store.put_summary(ClusterSummary("c1", health=Health.HEALTHY, heartbeat=svc.clock.now(), products=(cap,)))
    yield svc
    keys = list(store.client.scan_iter(match=f"{PREFIX}:*"))
    if keys:
        store.client.delete(*keys)
    store.close()


@pytest.fixture
async def api(service: BrokerService) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(service, service.clock, logs=KubeGateway({}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        yield client


@pytest.mark.anyio
async def test_a_job_no_cluster_could_hold_is_accepted_with_a_warning(
    api: httpx.AsyncClient, service: BrokerService
) -> None:
    r = await api.post("/v1/jobs", json={"name": "huge", "gpus": 8, "pods": 100})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["state"] == "QUEUED"
    assert body["warnings"] == [
        "never fits: no declared cluster could hold 100 pods x 8 GPUs even empty; the largest: c1 with "
        "16 H100-80GB (8 free on one node now); accepted, it waits for a cluster that can"
    ]
    stored = (await api.get(f"/v1/jobs/{body['id']}")).json()
    assert stored["warnings"] == body["warnings"]
    assert service.get(body["id"]).warnings == tuple(body["warnings"])  # kept in Redis with the job


@pytest.mark.anyio
async def test_a_job_that_fits_carries_no_warning(api: httpx.AsyncClient) -> None:
    r = await api.post("/v1/jobs", json={"name": "ok", "gpus": 8, "pods": 2})
    assert r.status_code == 201 and r.json()["warnings"] == []


NODE = {  # a GPU node as the API server returns it: 8 H100, 64 CPUs, 512 GiB allocatable
    "metadata": {
        "name": "gpu-1",
        "labels": {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81559",
        },
    },
    "spec": {},
    "status": {
        "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
        "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}


@pytest.mark.anyio
async def test_a_pod_asking_more_cpu_or_memory_than_any_node_has_is_warned_about(
    api: httpx.AsyncClient, service: BrokerService
) -> None:
    """Issue 48 finding 9: the summary the pollers write from the node objects (capacity.rollup) says the
    most CPU and memory one node has; a job asking more per pod was accepted without a word."""
    facts = node_facts(NODE, [], None)
    summary = summarize(
        ClusterSnapshot("c1", (facts,)), ClusterTraits("c1"), Health.HEALTHY, service.clock.now()
    )
    service.store.put_summary(summary)
    r = await api.post("/v1/jobs", json={"name": "fat", "gpus": 1, "cpu": 96, "memoryGiB": 1024})
    assert r.status_code == 201, r.text
    assert r.json()["warnings"] == [
        "never fits: no node of a declared cluster could hold one pod even empty: a pod asks 96 CPUs (the most "
        "on one node: 64) and 1024 GiB memory (the most on one node: 512 GiB) on c1 (H100-80GB); accepted, it "
        "waits for a cluster that can"
    ]
    ok = await api.post("/v1/jobs", json={"name": "lean", "gpus": 8, "cpu": 64, "memoryGiB": 512})
    assert ok.status_code == 201 and ok.json()["warnings"] == [], ok.text
