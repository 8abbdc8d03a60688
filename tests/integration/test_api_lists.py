"""GET /v1/jobs as a Kubernetes list, in-process (httpx over ASGITransport) on real Redis: following
metadata.continue returns every job exactly once while jobs are submitted and change state; filters by
state, tenant, cluster and name; a bad token or limit names its field; a user walks its own tenant only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.config.settings import load_tokens
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobState
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

TOKENS = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789ab",
    "root": "root-token-0123456789a",
}


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="lists" + uuid.uuid4().hex[:8])
    yield s
    s.close()


class Api:
    def __init__(self, store: RedisStateStore, tmp: Path) -> None:
        entries = [
            {"name": "alice", "tenant": "ml-research", "role": "user", "token": TOKENS["alice"]},
            {"name": "bob", "tenant": "vision", "role": "user", "token": TOKENS["bob"]},
            {"name": "root", "tenant": "ops", "role": "admin", "token": TOKENS["root"]},
        ]
        (tmp / "tokens.yaml").write_text(yaml.safe_dump(entries))
        self.clock = ManualClock()
        traits = {c: ClusterTraits(c) for c in ("onprem-a", "onprem-b")}
        self.service = BrokerService(store, RecordingGateway(), self.clock, traits)
        self.store = store
        self.app = create_app(self.service, self.clock, tokens=load_tokens(tmp / "tokens.yaml"), jobs=store)

    def call(self, who: str, method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
                headers = {"Authorization": f"Bearer {TOKENS[who]}"}
                return await client.request(method, path, headers=headers, **kw)

        return asyncio.run(go())

    def submit(self, who: str, name: str, **extra: Any) -> str:
        self.clock.t += 0.5
        r = self.call(who, "POST", "/v1/jobs", json={"name": name, "gpus": 1, **extra})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def move(self, job_id: str, state: JobState, cluster: str | None = None) -> None:
        record = self.store.get_job(job_id)
        assert record is not None
        self.store.save_job(replace(record, state=state, cluster=cluster or record.cluster))

    def walk(
        self, who: str, params: dict[str, Any] | None = None, between: Any = None
    ) -> tuple[list[list[str]], list[dict[str, Any]]]:
        """(each page's ids, each answer's metadata), following metadata.continue."""
        pages: list[list[str]] = []
        metas: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query = dict(params or {})
            if token:
                query["continue"] = token
            r = self.call(who, "GET", "/v1/jobs", params=query)
            assert r.status_code == 200, r.text
            body = r.json()
            pages.append([j["id"] for j in body["items"]])
            metas.append(body["metadata"])
            token = body["metadata"].get("continue")
            if not token:
                return pages, metas
            assert len(pages) < 200
            if between is not None:
                between(len(pages))


@pytest.fixture
def api(store: RedisStateStore, tmp_path: Path) -> Api:
    return Api(store, tmp_path)


def test_following_continue_returns_each_job_once_while_jobs_come_and_change(api: Api) -> None:
    first = [api.submit("root", f"job-{i}") for i in range(30)]
    later: list[str] = []

    def churn(page: int) -> None:
        api.move(first[page * 2], JobState.RUNNING, "onprem-a")  # one already listed
        api.move(first[29 - page], JobState.SUCCEEDED, "onprem-b")  # one still ahead
        later.append(api.submit("root", f"late-{page}"))

    pages, metas = api.walk("root", {"limit": 4}, between=churn)
    seen = [i for p in pages for i in p]
    assert len(seen) == len(set(seen)), "a job came twice"
    assert set(first) <= set(seen) and set(seen) <= set(first) | set(later)
    assert seen[: len(first)] == first, "oldest first, in submission order"
    assert all(len(p) <= 4 for p in pages)
    assert "continue" not in metas[-1] and all("continue" in m for m in metas[:-1])


def test_without_limit_every_job_comes_in_one_answer(api: Api) -> None:
    ids = [api.submit("root", f"job-{i}") for i in range(5)]
    body = api.call("root", "GET", "/v1/jobs").json()
    assert [j["id"] for j in body["items"]] == ids
    assert body["metadata"] == {} and body["kind"] == "JobList"
    assert body["items"][0]["queuePosition"] == 1  # the job view as before: queued jobs show their place


def test_filters_by_state_tenant_cluster_and_name(api: Api) -> None:
    a = [api.submit("alice", f"a-{i}") for i in range(4)]
    b = [api.submit("bob", "same") for _ in range(3)]
    api.move(a[1], JobState.RUNNING, "onprem-a")
    api.move(b[2], JobState.RUNNING, "onprem-b")

    def ids(**params: Any) -> list[str]:
        return [i for p in api.walk("root", {"limit": 2, **params})[0] for i in p]

    assert ids(state="RUNNING") == [a[1], b[2]]
    assert ids(state=["QUEUED", "RUNNING"], tenant="vision") == b
    assert ids(cluster="onprem-b") == [b[2]]
    assert ids(name="same", state="QUEUED") == b[:2]
    assert ids(tenant="ml-research") == a


def test_a_user_walks_its_own_tenant_only(api: Api) -> None:
    mine = [api.submit("alice", f"a-{i}") for i in range(5)]
    theirs = [api.submit("bob", f"b-{i}") for i in range(3)]
    assert [i for p in api.walk("alice", {"limit": 2})[0] for i in p] == mine
    assert [i for p in api.walk("bob", {"limit": 2})[0] for i in p] == theirs
    assert api.walk("alice", {"tenant": "vision"})[0] == [[]]  # another tenant's jobs do not exist for it
    # a token from an admin's walk of every tenant does not open bob's jobs to alice
    token = api.call("root", "GET", "/v1/jobs", params={"limit": 1}).json()["metadata"]["continue"]
    r = api.call("alice", "GET", "/v1/jobs", params={"limit": 1, "continue": token})
    assert r.status_code == 400 and r.json()["fields"][0]["field"] == "continue"


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"limit": 0}, 422, "limit"),
        ({"limit": 5001}, 422, "limit"),
        ({"limit": "many"}, 422, "limit"),
        ({"limit": 2, "continue": "not-a-token"}, 400, "continue"),
        ({"limit": 2, "continue": "eyJ2IjoxLCJhIjoiMCIsInEiOiJ4In0"}, 400, "continue"),  # no checksum
        ({"state": "NAPPING"}, 422, "state.0"),
    ],
)
def test_bad_limit_or_token_names_the_field(api: Api, params: dict[str, Any], code: int, field: str) -> None:
    api.submit("root", "one")
    r = api.call("root", "GET", "/v1/jobs", params=params)
    assert r.status_code == code, r.text
    assert [f["field"] for f in r.json()["fields"]] == [field]


def test_a_token_is_checked(api: Api) -> None:
    for i in range(3):
        api.submit("root", f"job-{i}")
    token = api.call("root", "GET", "/v1/jobs", params={"limit": 1}).json()["metadata"]["continue"]
    altered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    r = api.call("root", "GET", "/v1/jobs", params={"limit": 1, "continue": altered})
    assert r.status_code == 400 and "continue" in r.json()["message"]
    r = api.call("root", "GET", "/v1/jobs", params={"limit": 1, "continue": token, "state": "RUNNING"})
    assert r.status_code == 400 and "other filters" in r.json()["message"]
    r = api.call("root", "GET", "/v1/jobs", params={"limit": 1, "continue": token})
    assert r.status_code == 200 and len(r.json()["items"]) == 1


def test_a_page_shows_each_jobs_state_as_written_since_the_last_page(api: Api) -> None:
    ids = [api.submit("root", f"job-{i}") for i in range(4)]
    for job_id in ids[:3]:
        api.move(job_id, JobState.RUNNING, "onprem-a")
    before = api.call("root", "GET", "/v1/jobs", params={"limit": 10}).json()["items"]
    assert [j["state"] for j in before] == ["RUNNING", "RUNNING", "RUNNING", "QUEUED"]
    api.move(ids[1], JobState.SUCCEEDED, "onprem-b")  # a job whose item the API keeps changes
    after = api.call("root", "GET", "/v1/jobs", params={"limit": 10}).json()["items"]
    assert [(j["state"], j["cluster"]) for j in after] == [
        ("RUNNING", "onprem-a"),
        ("SUCCEEDED", "onprem-b"),
        ("RUNNING", "onprem-a"),
        ("QUEUED", None),
    ]
    assert after[3]["queuePosition"] == 1 and after[0]["queuePosition"] is None
