"""Finished jobs leave Redis (issue 48 finding 3): with `finishedJobRetentionSeconds: 30` and
`idempotencyKeyTtlSeconds: 30`, a finished job's record, event stream and Idempotency-Key are gone within
60 s of its end (its kept attempt logs too) and its id answers 410 with when it was removed; a job still running keeps everything.
Real Redis, the API in-process (httpx over ASGITransport) over a BrokerService, the retention purge
(adapters.redis_retention) on its own thread as the broker runs it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.redis_retention import RetentionLoop
from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobState
from tests.conftest import wait_for
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

RETENTION = 30.0


class Api:
    def __init__(self, redis_url: str) -> None:
        self.prefix = "ret" + uuid.uuid4().hex[:8]
        self.store = RedisStateStore(
            redis_url, prefix=self.prefix, unique_names=True, idempotency_ttl_seconds=RETENTION
        )
        self.service = BrokerService(
            self.store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")}
        )
        self.app = create_app(self.service, self.service.clock)
        self.redis = self.store.client

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
                return await client.request(method, path, **kw)

        return asyncio.run(go())

    def submit(self, name: str, key: str) -> str:
        body = {"name": name, "gpus": 1, "durationSeconds": 60}
        r = self.call("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def held(self, job_id: str, key: str) -> dict[str, bool]:
        p = self.prefix
        return {
            "record": bool(self.redis.exists(f"{p}:job:{job_id}")),
            "events": bool(self.redis.exists(f"{p}:events:{job_id}")),
            "key": bool(self.redis.exists(f"{p}:idem:default/{key}")),  # keys are scoped by tenant
            "indexed": bool(self.redis.sismember(f"{p}:jobs", job_id)),
            "logs": bool(self.redis.exists(f"{p}:attempt-logs:{job_id}")),
        }


@pytest.fixture
def api(redis_url: str) -> Iterator[Api]:
    a = Api(redis_url)
    yield a
    a.store.close()


def test_a_finished_job_is_gone_from_redis_within_60_s_and_answers_410(api: Api) -> None:
    done_key, live_key = "key-" + uuid.uuid4().hex, "key-" + uuid.uuid4().hex
    done = api.submit("done", done_key)
    live = api.submit("live", live_key)
    ttl = api.redis.ttl(f"{api.prefix}:idem:default/{done_key}")
    assert 0 < ttl <= RETENTION, ttl  # the key expires on its own too
    assert api.service.cancel(done).state is JobState.CANCELLED  # its end
    api.store.put_attempt_log(done, 1, b"the last lines of attempt 1\n")  # as status sync keeps them
    api.store.put_attempt_log(live, 1, b"a running job's earlier attempt\n")

    loop = RetentionLoop(api.store, RETENTION, interval=1.0)
    loop.start()
    try:
        wait_for(
            lambda: not any(api.held(done, done_key).values()),
            timeout=60,
            interval=0.5,
            what="the finished job's record, events and key to leave Redis",
        )
    finally:
        loop.stop()
    r = api.call("GET", f"/v1/jobs/{done}")
    assert r.status_code == 410, r.text
    assert "removed at" in r.json()["message"] and r.json()["removed"]["at"] > 0
    assert done not in [j["id"] for j in api.call("GET", "/v1/jobs").json()["items"]]
    # the job that did not end keeps its record, its events and its place; its key only its TTL
    assert {k: v for k, v in api.held(live, live_key).items() if k != "key"} == {
        "record": True,
        "events": True,
        "indexed": True,
        "logs": True,
    }
    assert api.call("GET", f"/v1/jobs/{live}").status_code == 200
    # the name of the removed job is free again, and its key may make a new job
    assert api.submit("done", done_key) != done


def test_the_purge_leaves_a_job_that_was_written_again_and_never_touches_an_unfinished_one(api: Api) -> None:
    job = api.submit("again", "k-" + uuid.uuid4().hex)
    api.service.cancel(job)
    assert api.redis.zscore(f"{api.prefix}:finished", job) is not None
    assert api.store.purge_finished(3600) == 0  # not past this retention
    assert api.redis.exists(f"{api.prefix}:job:{job}")
    # a record indexed as finished but found not ended is only taken off the index
    api.redis.hset(f"{api.prefix}:job:{job}", "state", "RUNNING")
    assert api.store.purge_finished(-1) == 0
    assert api.redis.exists(f"{api.prefix}:job:{job}")
    assert api.redis.zscore(f"{api.prefix}:finished", job) is None
