"""A job lost with the state store is explained to whoever asks for it (issue 21, case 6).

Real Redis: a job is QUEUED (no Job in any member cluster), the leader's recovery has seen it, the
store's keys are then deleted (Redis back empty), and the recovery rebuilds: the job cannot be
rebuilt. GET /v1/jobs/<its id> answers 410 Gone with when and why (not 404 "no job"), and an id that
never existed is still 404.
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


def test_a_queued_job_lost_with_redis_answers_410_with_when_and_why(
    store: RedisStateStore, tmp_path: Path
) -> None:
    traits = {"c1": ClusterTraits("c1")}
    service = BrokerService(store, RecordingGateway(), ManualClock(), traits)
    recovery = StoreRecovery(store, RecordingGateway(), service.clock, traits, store.prefix)
    recovery.check()  # first start: the store is initialised
    api = Api(service, write_tokens(tmp_path))
    r = api.call("root", "POST", "/v1/jobs", json={"name": "queued", "gpus": 64})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    recovery.check()  # the leader's pass sees it QUEUED
    keys = list(store.client.scan_iter(match=f"{store.prefix}:*"))
    store.client.delete(*keys)  # Redis back empty
    report = recovery.check()
    assert report is not None and job_id in report.lost_queued_ids

    gone = api.call("root", "GET", f"/v1/jobs/{job_id}")
    assert gone.status_code == 410, gone.text
    body = gone.json()
    assert (
        "was lost" in body["message"] and "QUEUED" in body["message"] and "submit it again" in body["message"]
    )
    assert body["lost"]["at"] == report.at
    assert api.call("root", "GET", "/v1/jobs/no-such-job").status_code == 404
