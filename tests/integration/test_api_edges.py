"""The API's hard edges, in-process (httpx over ASGI) on a real Redis: oversized bodies get 413 before
parsing, non-finite and absurd numbers are refused by name (as the fuzzing found them: `durationSeconds:
Infinity`, `minGpuMemoryGiB: 9.2e18`), a plain Job's refusal names the Job's field, and the follow
routes answer plainly for jobs that are not there or have no pods yet."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from adapters.kube import KubeGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.api.follow import add_follow_routes
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.errors import NotFound
from broker.core.model import ClusterTraits, JobRequest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def app_service(redis_url: str) -> Iterator[BrokerService]:
    store = RedisStateStore(redis_url, prefix="gpufed-api-edges")
    service = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
    yield service
    keys = list(store.client.scan_iter(match="gpufed-api-edges:*"))
    if keys:
        store.client.delete(*keys)
    store.close()


@pytest.fixture
async def api(app_service: BrokerService) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(app_service, app_service.clock, max_body_bytes=64 * 1024, logs=KubeGateway({}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        yield client


def _fields(r: httpx.Response) -> list[str]:
    return [f["field"] for f in r.json().get("fields", [])]


@pytest.mark.anyio
async def test_a_body_over_the_limit_is_413_declared_or_streamed(api: httpx.AsyncClient) -> None:
    big = b'{"name": "x", "labels": {"a": "' + b"y" * (128 * 1024) + b'"}}'
    r = await api.post("/v1/jobs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "65536" in r.json()["message"]

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b" " * 4096  # no Content-Length: counted as it arrives

    r = await api.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"name": "x", "gpus": 1, "durationSeconds": Infinity}', "durationSeconds"),
        ('{"name": "x", "gpus": 1, "durationSeconds": NaN}', "durationSeconds"),
        ('{"name": "x", "gpus": 1, "minGpuMemoryGiB": 9.2e18}', "minGpuMemoryGiB"),
        ('{"name": "x", "gpus": 1, "durationSeconds": 1e300}', "durationSeconds"),
        ('{"name": "x", "gpus": 1, "maxPricePerGpuHour": -Infinity}', "maxPricePerGpuHour"),
    ],
)
async def test_non_finite_and_absurd_numbers_are_refused_by_name(
    api: httpx.AsyncClient, raw: str, field: str
) -> None:
    r = await api.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert _fields(r) == [field]


@pytest.mark.anyio
async def test_a_plain_job_is_refused_with_the_jobs_field_named(api: httpx.AsyncClient) -> None:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "m", "image": "x", "env": [{"name": "A", "value": "1", "valueFrom": {}}]}
                    ],
                }
            }
        },
    }
    r = await api.post("/v1/jobs", json=job)
    assert r.status_code == 422
    assert _fields(r)[0].startswith("spec.template.spec.containers[0].env[0]"), r.json()

    job["spec"]["template"]["spec"]["containers"][0]["env"] = []
    r = await api.post("/v1/jobs", json=job)  # no GPU asked for: the resources are named
    assert r.status_code == 422
    assert "gpus >= 1 or a mig request" in r.json()["message"]

    job["spec"]["template"]["spec"]["tolerations"] = []
    r = await api.post("/v1/jobs", json=job)
    assert r.status_code == 422 and _fields(r) == ["spec.template.spec.tolerations"]


@pytest.mark.anyio
async def test_follow_routes_answer_plainly_for_missing_jobs_and_jobs_without_pods(
    api: httpx.AsyncClient,
) -> None:
    for path in ("/v1/jobs/nope/events?watch=1", "/v1/jobs/nope/logs", "/v1/jobs/nope/events"):
        r = await api.get(path)
        assert r.status_code == 404, path
    r = await api.post("/v1/jobs", json={"name": "queued", "gpus": 1})
    job_id = r.json()["id"]
    r = await api.get(f"/v1/jobs/{job_id}/logs")
    assert r.status_code == 409 and "has no pods yet" in r.json()["message"]
    r = await api.get("/v1/events", params={"limit": 5})
    assert any(e["jobId"] == job_id and e["state"] == "QUEUED" for e in r.json()["items"])
    assert json.dumps(r.json())  # plain JSON, no SSE without watch


@pytest.mark.anyio
async def test_yaml_bodies_are_read_safely(api: httpx.AsyncClient) -> None:
    job = (REPO / "examples" / "job.yaml").read_text()
    r = await api.post("/v1/jobs", content=job, headers={"content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    assert r.json()["request"]["image"] == "pytorch/pytorch:2.5.0-cuda12.4-cudnn9-runtime"

    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    r = await api.post("/v1/jobs", content="\n".join(lines), headers={"content-type": "application/yaml"})
    assert r.status_code == 422 and "expands to more than" in r.json()["message"]

    r = await api.post("/v1/jobs", content="{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and _fields(r) == ["(body)"]
    r = await api.post("/v1/jobs", json=[1, 2])
    assert r.status_code == 422 and "expected an object" in r.json()["message"]


@pytest.mark.anyio
async def test_the_follow_routes_show_a_caller_only_the_tenants_it_may_read(
    app_service: BrokerService,
) -> None:
    """The hook authentication plugs in (a reader dependency): another tenant's job is 404 on every
    follow route, and its transitions are left out of the fleet feed."""
    app = FastAPI()

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:  # as broker.api.routes answers it
        return JSONResponse(status_code=404, content={"error": "not-found", "message": str(exc)})

    add_follow_routes(app, app_service, KubeGateway({}), reader=lambda: lambda tenant: tenant == "team-a")
    mine, _ = app_service.submit(JobRequest("mine", tenant="team-a", gpus_per_pod=1))
    theirs, _ = app_service.submit(JobRequest("theirs", tenant="team-b", gpus_per_pod=1))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        for path in ("events", "events?watch=1", "logs"):
            r = await client.get(f"/v1/jobs/{theirs.id}/{path}")
            assert r.status_code == 404, path
        assert (await client.get(f"/v1/jobs/{mine.id}/events")).status_code == 200
        seen = {e["jobId"] for e in (await client.get("/v1/events", params={"limit": 1000})).json()["items"]}
        assert mine.id in seen and theirs.id not in seen
