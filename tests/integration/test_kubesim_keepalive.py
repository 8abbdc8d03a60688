"""kubesim keeps a connection alive across watches that end at their timeoutSeconds (issue 7, first bullet).

A watch that ended at its timeout used to leave its end-of-stream read pending on the connection, so the
next request on the same kept-alive connection raised `RuntimeError: readuntil() called while another
coroutine is already waiting` in the server and the connection was dropped.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator

import pytest
from kubernetes import client, config, watch

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation

pytestmark = pytest.mark.integration

CLUSTER = "sim-000"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(synthetic_fleet(1, 3), tmp_path_factory.mktemp("kubesim-ka"), controllers=False) as s:
        yield s


def _read_response(sock: ssl.SSLSocket) -> bytes:
    """Read one chunked watch response to its terminating chunk (fails if the server closes first)."""
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the kept-alive connection; got so far: {data[-200:]!r}"
        data += chunk
    return data


def test_one_connection_survives_many_timed_out_watches(
    sim: Simulation, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    port = int(sim.server_url(CLUSTER).rsplit(":", 1)[1])
    ctx = ssl.create_default_context(cafile=str(sim.ca_path(CLUSTER)))
    auth = f"Authorization: Bearer {sim.token(CLUSTER)}\r\n"
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1") as s:
        for _ in range(5):
            s.sendall(
                f"GET /api/v1/nodes?watch=true&timeoutSeconds=1 HTTP/1.1\r\nHost: k\r\n{auth}\r\n".encode()
            )
            body = _read_response(s)
            assert b'"type":"ADDED"' in body
        s.sendall(f"GET /version HTTP/1.1\r\nHost: k\r\n{auth}\r\n".encode())
        head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200 OK"), head[:80]
    errors = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def test_official_client_watches_in_a_row_leave_no_traceback(
    sim: Simulation, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(CLUSTER)), client_configuration=cfg, persist_config=False
    )
    cfg.retries = False  # a dropped connection must fail the test, not be retried away
    with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
        for _ in range(4):
            names = [
                ev["object"].metadata.name for ev in watch.Watch().stream(core.list_node, timeout_seconds=1)
            ]
            assert len(names) == 3
            assert len(core.list_node().items) == 3
    errors = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
