"""Tenants and roles through the HTTP API, and the global queue's quotas in a scheduling pass, on real Redis.

The API runs in-process (httpx over ASGITransport) with a tokens file read by the config loader; the
member clusters are not the subject, so the gateway only records the Jobs it is asked to create (the
walking skeleton and the demo cover the real path with auth on).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.api.views import FleetViews
from broker.app.auth import token_table
from broker.config.settings import load_tokens, parse_fleet_config
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.errors import ConfigError
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    JobState,
    ProductCapacity,
)
from broker.queue import queueing
from tests.conftest import free_port, wait_for
from tests.service_doubles import NOW, ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOKENS = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789ab",
    "root": "root-token-0123456789a",
    "watcher": "watcher-token-01234567",
}


def h100_cluster(name: str, nodes: int) -> ClusterSummary:
    """`nodes` idle 8-GPU H100 nodes."""
    gpus = 8 * nodes
    by_free = (0,) * 8 + (nodes,)
    return ClusterSummary(
        cluster=name,
        health=Health.HEALTHY,
        heartbeat=NOW,
        products=(ProductCapacity("H100-80GB", 81559, gpus, gpus, 0, gpus, by_free, by_free, nodes),),
    )


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="tenancy" + uuid.uuid4().hex[:8])
    yield s
    s.close()


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    """alice and bob are users of two tenants (bob's token hashed at rest), root an admin, watcher a viewer."""
    entries = [
        {"name": "alice", "tenant": "ml-research", "role": "user", "token": TOKENS["alice"]},
        {
            "name": "bob",
            "tenant": "vision",
            "role": "user",
            "token": "sha256:" + hashlib.sha256(TOKENS["bob"].encode()).hexdigest(),
        },
        {"name": "root", "tenant": "ops", "role": "admin", "token": TOKENS["root"]},
        {"name": "watcher", "tenant": "ops", "role": "viewer", "token": TOKENS["watcher"]},
    ]
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(entries))
    return path


class Api:
    """The app in-process through httpx's ASGI transport; each call as one named caller (or none)."""

    def __init__(self, service: BrokerService, tokens_file: Path) -> None:
        self.app = create_app(service, service.clock, tokens=load_tokens(tokens_file))

    def call(
        self, who: str | None, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        sent = dict(headers or {})
        if who is not None:
            sent["Authorization"] = f"Bearer {TOKENS.get(who, who)}"

        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
                return await client.request(method, path, headers=sent, **kw)

        return asyncio.run(go())

    def submit(self, who: str, name: str, **extra: Any) -> dict[str, Any]:
        r = self.call(who, "POST", "/v1/jobs", json={"name": name, "gpus": 1, **extra})
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
def api(store: RedisStateStore, tokens_file: Path) -> Api:
    settings = ServiceSettings(queue=queueing.QueuePolicy(priorities={"high": 100, "batch": 0}))
    service = BrokerService(
        store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")}, settings=settings
    )
    return Api(service, tokens_file)


def _status(r: httpx.Response, code: int, reason: str) -> None:
    assert r.status_code == code, r.text
    body = r.json()
    assert {k: body[k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "code": code,
    }
    assert body["message"]


def test_no_token_or_an_unknown_one_is_401_as_a_kubernetes_status(api: Api) -> None:
    for who in (None, "not-a-token-at-all-xyz"):
        for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/fleet")):
            r = api.call(who, method, path, json={"name": "x", "gpus": 1})
            _status(r, 401, "Unauthorized")
            assert r.headers["www-authenticate"].startswith("Bearer")
    _status(
        api.call(None, "GET", "/v1/jobs", headers={"Authorization": "Basic YWxpY2U6cHc="}),
        401,
        "Unauthorized",
    )
    assert api.call(None, "GET", "/healthz").status_code == 200


def test_a_user_sees_and_cancels_only_its_own_tenants_jobs(api: Api) -> None:
    mine = api.submit("alice", "alice-train")
    theirs = api.submit("bob", "bob-train")
    assert mine["tenant"] == "ml-research"  # from the token, not the body
    assert theirs["tenant"] == "vision"

    assert api.call("bob", "GET", f"/v1/jobs/{mine['id']}").status_code == 404
    assert api.call("bob", "GET", f"/v1/jobs/{mine['id']}/events").status_code == 404
    assert api.call("bob", "DELETE", f"/v1/jobs/{mine['id']}").status_code == 404
    assert api.call("alice", "GET", f"/v1/jobs/{mine['id']}").json()["state"] == "QUEUED"  # not cancelled

    assert [j["id"] for j in api.call("alice", "GET", "/v1/jobs").json()["items"]] == [mine["id"]]
    assert [j["id"] for j in api.call("bob", "GET", "/v1/jobs").json()["items"]] == [theirs["id"]]

    r = api.call("alice", "DELETE", f"/v1/jobs/{mine['id']}")
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"


def test_a_user_cannot_submit_for_another_tenant(api: Api) -> None:
    r = api.call("alice", "POST", "/v1/jobs", json={"name": "sneaky", "gpus": 1, "tenant": "vision"})
    _status(r, 403, "Forbidden")
    assert "ml-research" in r.json()["message"]
    same = api.call(
        "alice", "POST", "/v1/jobs", json={"name": "explicit", "gpus": 1, "tenant": "ml-research"}
    )
    assert same.status_code == 201 and same.json()["tenant"] == "ml-research"


def test_an_admin_sees_and_cancels_every_tenants_jobs_and_may_submit_for_one(api: Api) -> None:
    a = api.submit("alice", "a1")
    b = api.submit("bob", "b1")
    assert {j["id"] for j in api.call("root", "GET", "/v1/jobs").json()["items"]} == {a["id"], b["id"]}
    assert api.call("root", "DELETE", f"/v1/jobs/{b['id']}").json()["state"] == "CANCELLED"
    on_behalf = api.submit("root", "for-vision", tenant="vision")
    assert on_behalf["tenant"] == "vision"
    assert api.submit("root", "for-ops")["tenant"] == "ops"


def test_a_viewer_reads_fleet_and_queue_but_changes_nothing(api: Api) -> None:
    job = api.submit("alice", "a1")
    _status(api.call("watcher", "POST", "/v1/jobs", json={"name": "v1", "gpus": 1}), 403, "Forbidden")
    _status(api.call("watcher", "DELETE", f"/v1/jobs/{job['id']}"), 403, "Forbidden")
    assert api.call("watcher", "GET", f"/v1/jobs/{job['id']}").json()["state"] == "QUEUED"
    assert [j["id"] for j in api.call("watcher", "GET", "/v1/jobs").json()["items"]] == [job["id"]]
    assert api.call("watcher", "GET", "/v1/fleet").status_code == 200
    assert api.call("watcher", "GET", "/v1/clusters").status_code == 200


def test_idempotency_keys_are_scoped_per_tenant(api: Api) -> None:
    key = {"Idempotency-Key": "nightly-2026-12-01"}
    first = api.call("alice", "POST", "/v1/jobs", headers=key, json={"name": "nightly", "gpus": 1})
    again = api.call("alice", "POST", "/v1/jobs", headers=key, json={"name": "nightly", "gpus": 1})
    other = api.call("bob", "POST", "/v1/jobs", headers=key, json={"name": "nightly", "gpus": 1})
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 201)
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["id"] != first.json()["id"] and other.json()["tenant"] == "vision"


def test_the_job_view_shows_the_queue_position_and_why(api: Api) -> None:
    low = api.submit("alice", "low", priorityClass="batch")
    high = api.submit("bob", "high", priorityClass="high")
    view = api.call("alice", "GET", f"/v1/jobs/{low['id']}").json()
    assert (view["queuePosition"], view["queueReason"]) == (2, "behind 1 higher-priority job")
    top = api.call("bob", "GET", f"/v1/jobs/{high['id']}").json()
    assert (top["queuePosition"], top["queueReason"]) == (1, "first in the queue")
    r = api.call("alice", "POST", "/v1/jobs", json={"name": "odd", "gpus": 1, "priorityClass": "urgent"})
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "priorityClass"


def test_serve_refuses_to_start_without_auth_unless_told(tmp_path: Path, tokens_file: Path) -> None:
    raw: dict[str, Any] = {"clusters": [{"name": "c1", "kubeconfig": "c1.kubeconfig"}]}
    bare = parse_fleet_config(raw, "clusters.yaml", tmp_path)
    with pytest.raises(ConfigError, match=r"no authentication configured.*--insecure-no-auth"):
        token_table(bare, insecure_no_auth=False)
    assert token_table(bare, insecure_no_auth=True) is None
    with_auth = parse_fleet_config(
        {**raw, "auth": {"tokensFile": str(tokens_file)}}, "clusters.yaml", tmp_path
    )
    table = token_table(with_auth, insecure_no_auth=False)
    assert table is not None and len(table) == 4


# --------------------------------------------------------------------------- quotas in a scheduling pass

QUOTA_CASES = [
    pytest.param(
        {"vision": 8},
        [("r1", "ml-research"), ("r2", "ml-research"), ("v1", "vision")],
        {"r1": "PLACED", "v1": "PLACED", "r2": "PLACED"},
        None,
        id="idle capacity nobody with quota left waits for: ml-research borrows it",
    ),
    pytest.param(
        {"vision": 16},
        [("r1", "ml-research"), ("r2", "ml-research"), ("v1", "vision"), ("v2", "vision")],
        {"r1": "PLACED", "v1": "PLACED", "v2": "PLACED", "r2": "QUEUED"},
        "tenant ml-research over its H100-80GB quota 8/8; the 8 idle are claimed by tenants within their quota",
        id="vision has quota left and waits: ml-research may not borrow",
    ),
]


@pytest.mark.parametrize(("vision_quota", "jobs", "states", "held_reason"), QUOTA_CASES)
def test_quotas_with_borrowing_in_a_scheduling_pass(
    store: RedisStateStore,
    vision_quota: dict[str, int],
    jobs: list[tuple[str, str]],
    states: dict[str, str],
    held_reason: str | None,
) -> None:
    clock = ManualClock()
    store.put_summary(h100_cluster("c1", nodes=3))  # 24 idle H100s
    policy = queueing.QueuePolicy(
        tenants={
            "ml-research": queueing.TenantPolicy(quotas={"H100-80GB": 8}),
            "vision": queueing.TenantPolicy(quotas={"H100-80GB": vision_quota["vision"]}),
        }
    )
    gateway = RecordingGateway()
    service = BrokerService(
        store, gateway, clock, {"c1": ClusterTraits("c1")}, settings=ServiceSettings(queue=policy)
    )
    ids: dict[str, str] = {}
    for name, tenant in jobs:
        record, _ = service.submit(
            JobRequest(name=name, tenant=tenant, gpus_per_pod=8, gpu_products=("H100-80GB",))
        )
        ids[name] = record.id
        clock.t += 1
    service.schedule_once()
    got = {name: service.get(i) for name, i in ids.items()}
    assert {name: str(r.state) for name, r in got.items()} == states
    assert len(gateway.created) == sum(1 for s in states.values() if s == "PLACED")
    if held_reason is not None:
        assert got["r2"].reason == held_reason
        assert got["r2"].state is JobState.QUEUED


# --------------------------------------------------------------------------- the CLI's token


@pytest.fixture
def served(api: Api) -> Iterator[str]:
    """The same app served over real HTTP (uvicorn in a thread) for the CLI."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(api.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="the API to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _gpufed(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUFED_TOKEN"}
    if token is not None:
        env["GPUFED_TOKEN"] = token
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "gpufed"), *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_sends_the_token_from_the_flag_or_the_environment(api: Api, served: str) -> None:
    mine = api.submit("alice", "alice-job")
    api.submit("bob", "bob-job")

    by_flag = _gpufed("--token", TOKENS["alice"], "jobs", "--server", served)
    assert by_flag.returncode == 0, by_flag.stderr
    assert mine["id"] in by_flag.stdout and "bob-job" not in by_flag.stdout

    by_env = _gpufed("get", mine["id"], "-o", "json", "--server", served, token=TOKENS["alice"])
    assert by_env.returncode == 0, by_env.stderr
    assert '"queuePosition"' in by_env.stdout

    submitted = _gpufed("submit", "from-cli", "--gpus", "1", "--server", served, token=TOKENS["bob"])
    assert submitted.returncode == 0, submitted.stderr
    assert any(j["name"] == "from-cli" for j in api.call("bob", "GET", "/v1/jobs").json()["items"])

    explained = _gpufed("explain", "--gpus", "1", "--server", served, token=TOKENS["alice"])
    assert "queue: position 4 for tenant ml-research: behind 3 jobs" in explained.stdout, explained.stdout

    refused = _gpufed("jobs", "--server", served)
    assert refused.returncode != 0
    assert "no bearer token" in refused.stderr


def test_explain_says_where_the_job_would_stand_and_which_quota_would_hold_it(
    store: RedisStateStore, tokens_file: Path
) -> None:
    store.put_summary(h100_cluster("c1", nodes=1))  # 8 idle H100s
    policy = queueing.QueuePolicy(tenants={"ml-research": queueing.TenantPolicy(quotas={"H100-80GB": 8})})
    service = BrokerService(
        store,
        RecordingGateway(),
        ManualClock(),
        {"c1": ClusterTraits("c1")},
        settings=ServiceSettings(queue=policy),
    )
    api = Api(service, tokens_file)
    job = {"name": "big", "gpus": 8, "gpuProducts": ["H100-80GB"]}
    first = api.call("alice", "POST", "/v1/explain", json=job).json()
    assert first["placed"] and first["queue"] == {
        "tenant": "ml-research",
        "position": 1,
        "reason": "first in the queue",
        "heldByQuota": False,
        "borrowing": [],
    }
    api.submit("alice", "big", gpus=8, gpuProducts=["H100-80GB"])
    second = api.call("alice", "POST", "/v1/explain", json=job).json()["queue"]
    assert second["position"] == 2 and second["heldByQuota"]
    assert second["reason"] == "tenant ml-research over its H100-80GB quota 8/8; 0 idle to borrow, needs 8"
    other = api.call("bob", "POST", "/v1/explain", json=job).json()["queue"]
    assert other["tenant"] == "vision" and not other["heldByQuota"]


def test_scarce_gpus_go_to_the_tenant_with_the_smallest_share_not_the_oldest_job(
    store: RedisStateStore,
) -> None:
    clock = ManualClock()
    store.put_summary(h100_cluster("c1", nodes=2))  # 16 idle H100s
    gateway = RecordingGateway()
    service = BrokerService(store, gateway, clock, {"c1": ClusterTraits("c1")})

    def submit(name: str, tenant: str) -> str:
        record, _ = service.submit(
            JobRequest(name=name, tenant=tenant, gpus_per_pod=8, gpu_products=("H100-80GB",))
        )
        clock.t += 1
        return record.id

    first = submit("a1", "ml-research")
    service.schedule_once()
    assert service.get(first).state is JobState.PLACED  # ml-research now holds 8 of 16

    older = submit("a2", "ml-research")
    vision = submit("b1", "vision")
    robotics = submit("c1", "robotics")
    service.schedule_once()  # room for one more 8-GPU job
    states = {n: service.get(i).state for n, i in (("a2", older), ("b1", vision), ("c1", robotics))}
    assert states == {"a2": JobState.QUEUED, "b1": JobState.PLACED, "c1": JobState.QUEUED}
    slots = FleetViews.of(service).queue_slots([older, robotics])
    assert (slots[robotics].position, slots[older].position) == (1, 2)  # robotics holds nothing yet
