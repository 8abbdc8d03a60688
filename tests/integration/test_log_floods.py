"""No log flood for an expected fault (issue 21, case 5).

- A poller shard (in-process, real kubesim clusters, a private Redis that is then stopped) keeps
  failing to publish while Redis is down: one warning for the cause, no traceback, however many writes
  fail; when Redis is back it says so once, with the count.
- A client that disconnects in the middle of a request body (a real uvicorn server, a raw socket) is a
  debug line, not an ERROR with a traceback.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from adapters import redis_process
from adapters.poller_shard import PollerShard
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import PollerSpec
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, poll_for
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


def test_redis_down_is_one_warning_per_cause_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)
    world = synthetic_fleet(2, 1, gpus_per_node=8)
    with Simulation(world, tmp_path, speed=0, controllers=False) as sim:
        specs = [
            PollerSpec(c.name, sim.kubeconfig_path(c.name).as_posix(), None, ClusterTraits(c.name))
            for c in world.clusters
        ]
        shard = PollerShard(specs, server.url, "flood" + uuid.uuid4().hex[:6], 0.05, autostart=True)
        store = RedisStateStore(server.url, prefix=shard._store.prefix)
        try:
            poll_for("both summaries written", lambda: len(store.observed_summaries()) == 2, 60)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="adapters"):
                redis_process.stop(server.process)
                poll_for(
                    "many failed writes", lambda: shard.store_errors.occurrences.get("redis", 0) >= 40, 60
                )
                records = [
                    r
                    for r in caplog.records
                    if r.name.startswith(("adapters.ray_actors", "adapters.poller_shard"))
                ]
                assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]
                warned = [r for r in records if r.levelno == logging.WARNING and "Redis" in r.getMessage()]
                assert len(warned) == 1, [r.getMessage() for r in records]
                server = redis_process.spawn(tmp_path, port)
                poll_for(
                    "publishing says it works again",
                    lambda: any("works again" in r.getMessage() for r in caplog.records),
                    60,
                )
        finally:
            shard.stop()
            store.close()
            redis_process.stop(server.process)


@pytest.fixture
def served(redis_url: str) -> Iterator[int]:
    store = RedisStateStore(redis_url, prefix="disc" + uuid.uuid4().hex[:6])
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service, service.clock), port=port, lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    poll_for("the server started", lambda: server.started, 30)
    yield port
    server.should_exit = True
    thread.join(timeout=10)
    store.close()


def test_a_client_that_leaves_mid_body_is_a_debug_line(served: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        with socket.create_connection(("127.0.0.1", served)) as sock:
            sock.sendall(
                b"POST /v1/jobs HTTP/1.1\r\nHost: gpufed\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"name": "half'
            )
        poll_for(
            "the disconnect noticed",
            lambda: any("disconnected mid-body" in r.getMessage() for r in caplog.records),
            30,
        )
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
