"""A job lost with the state store is explained to its owner (issue 21, case 6).

Real Redis: alice's job is QUEUED (no Job in any member cluster), the leader's recovery has seen it,
the store's keys are then deleted (Redis back empty), and the recovery rebuilds: the job cannot be
rebuilt, so it is kept as LOST (its tenant from the record the leader held). It shows in alice's job
list as LOST; GET /v1/jobs/<its id> answers 410 Gone with when and why to alice and to an admin (not to
a viewer or another tenant: 404) until alice has seen it, then 200 with state LOST; its key is free.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from broker.ha.recovery import StoreRecovery
from tests.integration.test_public_routes import write_tokens
from tests.integration.test_tenancy import Api
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="lost" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def test_a_queued_job_lost_with_redis_is_listed_as_lost_and_explained_to_its_owner_until_seen(
    store: RedisStateStore, tmp_path: Path
) -> None:
    traits = {"c1": ClusterTraits("c1")}
    service = BrokerService(store, RecordingGateway(), ManualClock(), traits)
    recovery = StoreRecovery(store, RecordingGateway(), service.clock, traits, store.prefix)
    recovery.check()  # first start: the store is initialised
    api = Api(service, write_tokens(tmp_path))
    r = api.call(
        "alice", "POST", "/v1/jobs", json={"name": "queued", "gpus": 64}, headers={"Idempotency-Key": "q1"}
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    recovery.check()  # the leader's pass sees it QUEUED
    keys = list(store.client.scan_iter(match=f"{store.prefix}:*"))
    store.client.delete(*keys)  # Redis back empty
    report = recovery.check()
    assert report is not None and job_id in report.lost_queued_ids

    listed = api.call("alice", "GET", "/v1/jobs").json()["items"]
    assert [(j["id"], j["state"]) for j in listed] == [(job_id, "LOST")]
    assert api.call("watcher", "GET", f"/v1/jobs/{job_id}").status_code == 404  # not its owner
    assert api.call("root", "GET", f"/v1/jobs/{job_id}").status_code == 410  # an admin: told, not "seen"

    gone = api.call("alice", "GET", f"/v1/jobs/{job_id}")
    assert gone.status_code == 410, gone.text
    body = gone.json()
    assert (
        "was lost" in body["message"] and "QUEUED" in body["message"] and "submit it again" in body["message"]
    )
    assert body["lost"]["at"] == report.at
    seen = api.call("alice", "GET", f"/v1/jobs/{job_id}")  # seen by its owner: an ended job like others
    assert seen.status_code == 200 and seen.json()["state"] == "LOST", seen.text
    assert "lost" in seen.json()["reason"]
    assert api.call("root", "GET", f"/v1/jobs/{job_id}").status_code == 200
    assert api.call("root", "GET", "/v1/jobs/no-such-job").status_code == 404

    again = api.call(
        "alice", "POST", "/v1/jobs", json={"name": "queued", "gpus": 64}, headers={"Idempotency-Key": "q1"}
    )
    assert again.status_code == 201 and again.json()["id"] != job_id  # a lost job's key submits anew
