"""Groups, arrays, dependencies, hold and dry run through the HTTP API (issue 46), on real Redis.

The API runs in-process (test_tenancy's Api) over a service whose gateway only records the Jobs it is
asked to create; the control loop's steps (release_dependents, schedule_once) are called by the test, and
a job's end is written as status sync would write it. The kubesim tests (test_batch_kubesim.py) run the
same behaviour end to end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.model import ClusterTraits, JobState
from broker.queue import queueing
from tests.integration.test_tenancy import TOKENS, Api, h100_cluster
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="batch" + uuid.uuid4().hex[:8])
    yield s
    s.close()


@pytest.fixture
def service(store: RedisStateStore) -> BrokerService:
    settings = ServiceSettings(queue=queueing.QueuePolicy(priorities={"high": 100, "batch": 0}))
    svc = BrokerService(
        store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")}, settings=settings
    )
    store.put_summary(h100_cluster("c1", 4))
    return svc


@pytest.fixture
def api(service: BrokerService, tmp_path: Path) -> Api:
    return _api(service, tmp_path)


def _api(service: BrokerService, tmp_path: Path) -> Api:
    """alice (ml-research) and bob (vision) are users, root an admin, watcher a viewer."""
    people = [("alice", "ml-research", "user"), ("bob", "vision", "user"), ("root", "ops", "admin")]
    people.append(("watcher", "ops", "viewer"))
    path = tmp_path / "tokens.yaml"
    path.write_text(
        yaml.safe_dump([{"name": n, "tenant": t, "role": r, "token": TOKENS[n]} for n, t, r in people])
    )
    return Api(service, path)


def _end(service: BrokerService, job_id: str, state: JobState) -> None:
    """The job ends as status sync would record it."""
    record = service.get(job_id)
    service._transition(record, state, f"test: {state}", record.state)


def _state(api: Api, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = api.call("alice", "GET", f"/v1/jobs/{job_id}").json()
    return body


def test_a_group_is_listed_counted_and_cancelled_and_every_job_carries_it(api: Api) -> None:
    a = api.submit("alice", "a", group="sweep")
    b = api.submit("alice", "b", group="sweep")
    other = api.submit("alice", "c")
    assert a["group"] == "sweep" and other["group"] is None
    listed = {j["id"]: j["group"] for j in api.call("alice", "GET", "/v1/jobs").json()["items"]}
    assert listed == {a["id"]: "sweep", b["id"]: "sweep", other["id"]: None}
    assert _state(api, a["id"])["group"] == "sweep"

    g = api.call("alice", "GET", "/v1/groups/sweep").json()
    assert g["counts"] == {"QUEUED": 2} and {j["id"] for j in g["items"]} == {a["id"], b["id"]}
    assert api.call("alice", "GET", "/v1/groups").json()["items"] == [
        {"name": "sweep", "tenant": "ml-research", "counts": {"QUEUED": 2}, "total": 2}
    ]
    assert api.call("bob", "GET", "/v1/groups/sweep").status_code == 404  # another tenant's group
    assert api.call("bob", "POST", "/v1/groups/sweep/cancel").status_code == 404
    assert api.call("watcher", "POST", "/v1/groups/sweep/cancel?tenant=ml-research").status_code == 403

    r = api.call("alice", "POST", "/v1/groups/sweep/cancel")
    assert r.status_code == 200, r.text
    assert set(r.json()["cancelled"]) == {a["id"], b["id"]} and r.json()["counts"] == {"CANCELLED": 2}
    assert _state(api, other["id"])["state"] == "QUEUED"


def test_an_array_submits_its_members_with_their_index_and_the_cap_holds_the_rest(
    api: Api, service: BrokerService
) -> None:
    r = api.call(
        "alice", "POST", "/v1/jobs", json={"name": "hp", "gpus": 1, "array": {"count": 5, "parallelism": 2}}
    )
    assert r.status_code == 201, r.text
    items = r.json()["items"]
    assert r.json()["group"] == "hp" and [j["name"] for j in items] == [f"hp-{i}" for i in range(5)]
    for i, j in enumerate(items):
        env = {e["name"]: e["value"] for e in j["request"]["env"]}
        assert env["GPUFED_ARRAY_INDEX"] == str(i) and env["GPUFED_ARRAY_COUNT"] == "5"
    service.schedule_once()
    states = [service.get(j["id"]).state for j in items]
    # four nodes free: the cap, not capacity, holds the others; the lowest indexes go first
    assert states == [JobState.PLACED] * 2 + [JobState.QUEUED] * 3, states
    assert "parallelism 2" in service.get(items[4]["id"]).reason
    _end(
        service,
        next(j["id"] for j, s in zip(items, states, strict=True) if s is JobState.PLACED),
        JobState.SUCCEEDED,
    )
    service.schedule_once()
    assert [service.get(j["id"]).state for j in items].count(JobState.PLACED) == 2


def test_a_dependent_waits_pending_runs_after_success_and_fails_when_never_met(
    api: Api, service: BrokerService
) -> None:
    a = api.submit("alice", "train")
    b = api.submit("alice", "evaluate", dependsOn=[{"job": "train", "when": "succeeded"}])  # by name
    c = api.submit("alice", "report", dependsOn=[{"job": a["id"], "when": "failed"}])
    assert b["state"] == "PENDING" and b["reason"] == "waiting for job train to be succeeded"
    assert b["dependsOn"] == [{"job": "train", "when": "succeeded"}]
    service.release_dependents()
    service.schedule_once()
    assert service.get(b["id"]).state is JobState.PENDING  # not placed while A has not ended
    assert service.get(a["id"]).state is JobState.PLACED
    _end(service, a["id"], JobState.SUCCEEDED)
    service.release_dependents()
    assert service.get(b["id"]).state is JobState.QUEUED
    failed = service.get(c["id"])
    assert failed.state is JobState.FAILED and "dependency failed" in failed.reason, failed.reason
    gateway = service.gateway
    assert isinstance(gateway, RecordingGateway)
    assert not [x for x in gateway.created if c["id"] in x.name]  # C never ran


def test_a_cycle_and_an_unknown_dependency_are_refused_naming_the_field(api: Api) -> None:
    api.submit("alice", "seed", group="g1")
    x = api.submit("alice", "x", group="g2", dependsOn=[{"group": "g1"}])
    assert x["state"] == "PENDING"
    r = api.call(
        "alice",
        "POST",
        "/v1/jobs",
        json={"name": "y", "gpus": 1, "group": "g1", "dependsOn": [{"group": "g2"}]},
    )
    assert r.status_code == 422 and "cycle" in r.text, r.text
    r = api.call(
        "alice",
        "POST",
        "/v1/jobs",
        json={"name": "z", "gpus": 1, "group": "g3", "dependsOn": [{"group": "g3"}]},
    )
    assert r.status_code == 422 and "cycle" in r.text
    r = api.call("alice", "POST", "/v1/jobs", json={"name": "w", "gpus": 1, "dependsOn": [{"job": "nope"}]})
    assert r.status_code == 422 and "dependsOn[0].job" in r.text
    r = api.call(
        "alice", "POST", "/v1/jobs", json={"name": "v", "gpus": 1, "dependsOn": [{"job": "x", "group": "g1"}]}
    )
    assert r.status_code == 422 and "exactly one" in r.text


def test_hold_and_release_by_the_owner_or_an_admin(api: Api, service: BrokerService) -> None:
    job = api.submit("alice", "held")
    assert api.call("bob", "POST", f"/v1/jobs/{job['id']}/hold").status_code == 404
    r = api.call("alice", "POST", f"/v1/jobs/{job['id']}/hold")
    assert r.status_code == 200 and r.json()["state"] == "PENDING" and r.json()["reason"] == "held by alice"
    service.release_dependents()
    service.schedule_once()
    assert service.get(job["id"]).state is JobState.PENDING and service.get(job["id"]).held_by == "alice"
    r = api.call("root", "POST", f"/v1/jobs/{job['id']}/release")
    assert r.status_code == 200 and r.json()["reason"] == "released by root"
    service.release_dependents()
    service.schedule_once()
    assert service.get(job["id"]).state is JobState.PLACED
    assert api.call("alice", "POST", f"/v1/jobs/{job['id']}/hold").status_code == 409  # placed already


def test_dry_run_answers_what_submit_would_and_stores_nothing(api: Api, service: BrokerService) -> None:
    r = api.call("alice", "POST", "/v1/jobs?dryRun=All", json={"name": "probe", "gpus": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["dryRun"] is True and body["state"] == "QUEUED" and body["tenant"] == "ml-research"
    assert body["explain"]["clusters"][0]["cluster"] == "c1"
    assert api.call("alice", "GET", "/v1/jobs").json()["items"] == []
    assert service.store.list_jobs() == []
    service.release_dependents()
    service.schedule_once()
    gateway = service.gateway
    assert isinstance(gateway, RecordingGateway) and gateway.created == []  # no member object either
    r = api.call(
        "alice",
        "POST",
        "/v1/jobs?dryRun=All",
        json={"name": "bad", "gpus": 1, "dependsOn": [{"job": "nope"}]},
    )
    assert r.status_code == 422  # the same refusal submit would give
    r = api.call("alice", "POST", "/v1/jobs?dryRun=Some", json={"name": "p", "gpus": 1})
    assert r.status_code == 422 and "dryRun" in r.text
    assert service.store.list_jobs() == []


def test_tenants_show_the_quota_ledger_with_borrowing_and_a_user_sees_only_itself(
    store: RedisStateStore, tmp_path: Path
) -> None:
    policy = queueing.QueuePolicy(
        tenants={
            "ml-research": queueing.TenantPolicy(quotas={"H100-80GB": 8}),
            "vision": queueing.TenantPolicy(quotas={"H100-80GB": 16}, weight=2),
        }
    )
    service = BrokerService(
        store,
        RecordingGateway(),
        ManualClock(),
        {"c1": ClusterTraits("c1")},
        settings=ServiceSettings(queue=policy),
    )
    store.put_summary(h100_cluster("c1", 3))  # 24 idle H100s
    api = _api(service, tmp_path)
    for name in ("r1", "r2"):  # the second is over ml-research's quota: it borrows vision's idle share
        api.submit("alice", name, gpus=8, gpuProducts=["H100-80GB"])
    service.schedule_once()
    queued = api.submit("alice", "r3", gpus=8, gpuProducts=["H100-80GB"])
    held = api.submit("alice", "r4", gpus=1)
    api.call("alice", "POST", f"/v1/jobs/{held['id']}/hold")

    ledger = queueing.usage_of(store.list_jobs([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING]))
    mine = api.call("alice", "GET", "/v1/tenants").json()["items"]
    assert [t["tenant"] for t in mine] == ["ml-research"]  # a user sees only its own tenant
    (ml,) = mine
    assert ml["used"] == dict(ledger["ml-research"]) == {"H100-80GB": 16, "*": 16}
    assert ml["quota"] == {"H100-80GB": 8} and ml["borrowed"] == {"H100-80GB": 8}
    assert ml["running"] == {"H100-80GB": 2} and ml["queued"] == {"H100-80GB": 1} and ml["pending"] == 1
    assert queued["state"] == "QUEUED"

    every = {t["tenant"]: t for t in api.call("watcher", "GET", "/v1/tenants").json()["items"]}
    assert set(every) == {"ml-research", "vision"}
    assert every["vision"]["lent"] == {"H100-80GB": 8} and every["vision"]["used"] == {}
    assert every["vision"]["position"] == 1 and every["ml-research"]["position"] == 2  # fair-share order
    assert every["ml-research"]["share"] == round(16 / 24, 6)


def test_a_kubernetes_job_and_a_jobset_join_a_group_by_their_label(api: Api) -> None:
    for example in ("job.yaml", "jobset.yaml"):
        doc = yaml.safe_load((REPO / "examples" / example).read_text())
        doc["metadata"].setdefault("labels", {})["gpufed.io/group"] = "kinds"
        r = api.call("alice", "POST", "/v1/jobs", json=doc)
        assert r.status_code == 201, r.text
        assert r.json()["group"] == "kinds"
    assert api.call("alice", "GET", "/v1/groups/kinds").json()["total"] == 2
    doc["metadata"]["labels"]["gpufed.io/group"] = "Not_A_Label"
    doc["metadata"]["name"] = "other"
    r = api.call("alice", "POST", "/v1/jobs", json=doc)
    assert r.status_code == 422 and "gpufed.io/group" in r.text


def test_a_group_is_reprioritised_where_not_placed_yet(api: Api, service: BrokerService) -> None:
    placed = api.submit("alice", "p0", group="ranked", gpus=8)
    service.schedule_once()
    waiting = api.submit("alice", "p1", group="ranked", gpus=8)
    r = api.call("alice", "POST", "/v1/groups/ranked/priority", json={"priorityClass": "high"})
    assert r.status_code == 200 and r.json()["changed"] == [waiting["id"]]
    assert service.get(waiting["id"]).request.priority_class == "high"
    assert service.get(placed["id"]).request.priority_class is None  # placed: it keeps its own
    r = api.call("alice", "POST", "/v1/groups/ranked/priority", json={"priorityClass": "nope"})
    assert r.status_code == 422 and "priorityClass" in r.text


def test_a_user_whose_tenant_has_no_jobs_and_no_quota_still_sees_its_own_tenant(
    store: RedisStateStore, tmp_path: Path
) -> None:
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    store.put_summary(h100_cluster("c1", 1))
    api = _api(service, tmp_path)
    api.submit("alice", "r1", gpus=8, gpuProducts=["H100-80GB"])
    service.schedule_once()
    (vision,) = api.call("bob", "GET", "/v1/tenants").json()["items"]  # not "No tenants."
    assert vision["tenant"] == "vision" and vision["used"] == {} and vision["running"] == {}
    assert vision["position"] == 1  # it holds nothing: served first
    every = [t["tenant"] for t in api.call("watcher", "GET", "/v1/tenants").json()["items"]]
    assert every == ["ml-research"]  # an admin or viewer sees the tenants with quotas or jobs
