"""Job notifications (issue 46): signed webhooks, delivered at least once with retries, off the control loop.

A receiver on 127.0.0.1 (http.server in a thread) records what it is sent; it can answer 500 first, or
hang. The notifier (adapters.webhooks) follows a real Redis's event stream; the jobs move as the service
moves them (in-process), and in the last test a whole broker over kubesim runs with a webhook that hangs.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.redis_store import RedisStateStore
from adapters.webhooks import WebhookNotifier
from broker.controller.service import BrokerService
from broker.core import notify
from broker.core.batch_fields import BatchFields, Notify
from broker.core.model import ClusterTraits, JobRequest, JobState
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.demo_broker import demo_broker
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-for-ml-research"


class Receiver:
    """Records each POST (path, headers, body); /flaky answers 500 to a delivery's first try, /hang holds
    the request until released."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, str], bytes]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                first = not any(p == self.path for p, _, _ in outer.got)
                outer.got.append((self.path, dict(self.headers.items()), body))
                if self.path == "/hang":
                    outer.release.wait(120)
                code = 500 if self.path == "/flaky" and first else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def on(self, path: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(h, json.loads(b)) for p, h, b in list(self.got) if p == path]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="notify" + uuid.uuid4().hex[:8])
    yield s
    s.close()


@pytest.fixture
def service(store: RedisStateStore) -> BrokerService:
    return BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})


@pytest.fixture
def notifier(store: RedisStateStore, receiver: Receiver) -> Iterator[WebhookNotifier]:
    tenants = {"ml-research": notify.TenantNotify(Notify(f"{receiver.url}/tenant", ("FAILED",)), SECRET)}
    n = WebhookNotifier(store, store.client, store.prefix, lambda: tenants, backoff_max=0.2)
    n.start()
    yield n
    n.stop()


def _job(
    service: BrokerService, name: str, url: str | None, on: tuple[str, ...] = ("SUCCEEDED", "FAILED")
) -> str:
    batch = BatchFields(notify=Notify(url, on) if url else None)
    record, _ = service.submit(JobRequest(name=name, tenant="ml-research", gpus_per_pod=1, batch=batch))
    return record.id


def _move(service: BrokerService, job_id: str, *states: JobState) -> None:
    for state in states:
        record = service.get(job_id)
        service._transition(record, state, f"test: {state}", record.state)


def _delivery_events(service: BrokerService, job_id: str) -> list[str]:
    return [e.reason for e in service.events(job_id) if e.reason.startswith(notify.DELIVERY_PREFIX)]


def test_the_configured_events_and_only_they_arrive_signed(
    service: BrokerService, notifier: WebhookNotifier, receiver: Receiver
) -> None:
    job = _job(service, "signed", f"{receiver.url}/job")
    _move(service, job, JobState.PLACED, JobState.RUNNING, JobState.SUCCEEDED)
    wait_for(
        lambda: len(_delivery_events(service, job)) == 1, timeout=30, what="the delivery in the job's events"
    )
    got = receiver.on("/job")
    assert [b["state"] for _, b in got] == ["SUCCEEDED"]  # not QUEUED, PLACED or RUNNING
    headers, body = got[0]
    assert body["id"] == job and body["name"] == "signed" and body["tenant"] == "ml-research"
    raw = notify.body_bytes(body)
    assert notify.verify(SECRET, headers[notify.SIGNATURE_HEADER], raw, now=time.time())
    assert not notify.verify("another-secret", headers[notify.SIGNATURE_HEADER], raw, now=time.time())
    assert receiver.on("/tenant") == []  # the tenant's target wants FAILED only
    (said,) = _delivery_events(service, job)
    assert said.startswith(f"webhook SUCCEEDED delivered to {receiver.url}/job (HTTP 200, 1 try)")

    failing = _job(service, "fails", None)  # no target of its own: the tenant's hears of its failure
    _move(service, failing, JobState.PLACED, JobState.FAILED)
    wait_for(lambda: len(receiver.on("/tenant")) == 1, timeout=30, what="the tenant's webhook")
    assert receiver.on("/tenant")[0][1]["state"] == "FAILED"


def test_a_delivery_answered_500_is_tried_again_and_said_in_the_events(
    service: BrokerService, notifier: WebhookNotifier, receiver: Receiver
) -> None:
    job = _job(service, "flaky", f"{receiver.url}/flaky", on=("FAILED",))
    _move(service, job, JobState.PLACED, JobState.FAILED)

    def said() -> list[str]:
        return [r for r in _delivery_events(service, job) if "/flaky" in r]

    wait_for(lambda: len(said()) == 1, timeout=30, what="the delivery in the job's events")
    tries = receiver.on("/flaky")
    assert len(tries) == 2 and tries[0][0]["X-Gpufed-Delivery"] == tries[1][0]["X-Gpufed-Delivery"]
    assert "(HTTP 200, 2 tries)" in said()[0]
    assert len(receiver.on("/tenant")) == 1  # the tenant's own target hears of it too, once


@pytest.mark.race
def test_a_delivery_accepted_but_not_sent_when_the_leader_stops_is_sent_by_the_next(
    store: RedisStateStore, service: BrokerService, receiver: Receiver
) -> None:
    first = WebhookNotifier(
        store, store.client, store.prefix, lambda: {}, workers=0
    )  # accepts, sends nothing
    first.start()
    job = _job(service, "restart", f"{receiver.url}/job", on=("SUCCEEDED",))
    _move(service, job, JobState.PLACED, JobState.RUNNING, JobState.SUCCEEDED)
    wait_for(lambda: bool(store.client.hlen(f"{store.prefix}:notify:pending")), timeout=30, what="it pending")
    first.stop()  # as a leader that stops (or dies) before sending
    assert receiver.on("/job") == []
    second = WebhookNotifier(store, store.client, store.prefix, lambda: {}, backoff_max=0.2)
    second.start()
    try:
        wait_for(
            lambda: len(_delivery_events(service, job)) == 1, timeout=30, what="the next leader's delivery"
        )
    finally:
        second.stop()
    assert [b["state"] for _, b in receiver.on("/job")] == [
        "SUCCEEDED"
    ]  # once: the follower did not repeat it


def test_a_webhook_that_hangs_never_delays_placement(
    redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory, receiver: Receiver
) -> None:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with (
        Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as sim,
        demo_broker(sim, tmp_path_factory.mktemp("broker"), redis_url, "notify-hang") as b,
    ):

        def submit(name: str, **extra: Any) -> str:
            r = httpx.post(
                f"{b.url}/v1/jobs",
                json={"name": name, "gpus": 1, "durationSeconds": 600, **extra},
                headers=b.auth,
                timeout=30,
            )
            assert r.status_code == 201, r.text
            job_id: str = r.json()["id"]
            return job_id

        every = ["PLACED", "ADMITTED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
        for i in range(3):  # more stuck deliveries than the notifier has workers
            submit(f"loud-{i}", notify={"webhook": f"{receiver.url}/hang", "on": every})
        wait_for(lambda: len(receiver.on("/hang")) >= 2, timeout=60, what="the webhook to hang")
        quiet = [submit(f"quiet-{i}") for i in range(3)]

        def placed(job_id: str) -> bool:
            state = httpx.get(f"{b.url}/v1/jobs/{job_id}", headers=b.auth, timeout=30).json()["state"]
            return bool(state in ("PLACED", "ADMITTED", "RUNNING"))

        for job_id in quiet:
            wait_for(
                functools.partial(placed, job_id), timeout=60, what=f"{job_id} placed while the webhook hangs"
            )
        assert not receiver.release.is_set()  # it hung all along
