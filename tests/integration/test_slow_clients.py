"""Slow clients are cut off (issue 21, case 7): a real uvicorn server with the broker's HTTP protocol
(broker.api.timeouts, short deadlines here), raw sockets.

A connection that never finishes its headers is closed at the headers deadline; one that sends its
headers and then dribbles its body is closed at the body deadline; a normal request is served.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from adapters.redis_store import RedisStateStore
from broker.api.routes import create_app
from broker.api.timeouts import timed_protocol
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from tests.conftest import free_port, poll_for
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture
def port(redis_url: str) -> Iterator[int]:
    store = RedisStateStore(redis_url, prefix="slow" + uuid.uuid4().hex[:6])
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    chosen = free_port()
    config = uvicorn.Config(
        create_app(service, service.clock), port=chosen, lifespan="off", http=timed_protocol(1.0, 2.0)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    poll_for("the server started", lambda: server.started, 30)
    yield chosen
    server.should_exit = True
    thread.join(timeout=10)
    store.close()


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_headers_that_never_end_are_cut_off(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: gpufed\r\n")
        poll_for("the server to close the connection", lambda: _closed_by_server(sock), 20)


def test_a_body_that_dribbles_is_cut_off_and_a_normal_request_is_served(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: gpufed\r\nContent-Type: application/json\r\n"
            b'Content-Length: 500\r\n\r\n{"name": '
        )
        poll_for("the server to close the connection", lambda: _closed_by_server(sock), 20)
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
