"""The synchronous member client's bearer token (adapters/kube_token.py): the kubeconfig loader's refresh
hook runs at most once per BEARER_RECHECK_SECONDS, not before every request, and at once after a 401 (a
rotated token is picked up by the next request).

A plain HTTP server on loopback stands for the member's API server; the kubeconfig is a real one, loaded
by the kubernetes client's own loader (adapters.kube_rest.connect)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from adapters.kube_rest import KubeRest, connect
from adapters.kube_token import RecheckedHook
from broker.core.errors import ClusterForbidden

pytestmark = pytest.mark.integration


class Member(ThreadingHTTPServer):
    accepted = "Bearer first"
    seen: list[str]


class Handler(BaseHTTPRequestHandler):
    server: Member

    def do_GET(self) -> None:
        token = self.headers.get("Authorization", "")
        self.server.seen.append(token)
        ok = token == self.server.accepted
        body = json.dumps(
            {"gitVersion": "v1.37.0"} if ok else {"kind": "Status", "reason": "Unauthorized", "code": 401}
        ).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def member() -> Iterator[Member]:
    server = Member(("127.0.0.1", 0), Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def kubeconfig(path: Path, port: int) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "m1", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "first"}}],
                "contexts": [{"name": "m1", "context": {"cluster": "m1", "user": "u"}}],
                "current-context": "m1",
            }
        )
    )
    return path


def test_the_refresh_hook_runs_once_for_many_requests_and_again_after_a_401(
    member: Member, tmp_path: Path
) -> None:
    api = connect(kubeconfig(tmp_path / "kubeconfig", member.server_address[1]))
    hook = api.configuration.refresh_api_key_hook
    assert isinstance(hook, RecheckedHook)
    rest = KubeRest("m1", api)
    try:
        for _ in range(20):
            assert rest.request("GET", "/version")["gitVersion"] == "v1.37.0"
        assert hook.runs == 1, "the kubeconfig was applied again before every request"

        member.accepted = "Bearer second"  # the member now takes another token only
        with pytest.raises(ClusterForbidden):
            rest.request("GET", "/version")  # within the interval: the hook did not run
        assert hook.runs == 1
        with pytest.raises(ClusterForbidden):
            rest.request("GET", "/version")  # after the 401 it ran (this kubeconfig's token is static)
        assert hook.runs == 2
        assert member.seen == ["Bearer first"] * 22
    finally:
        rest.close()


def test_the_hook_runs_again_once_its_interval_is_over() -> None:
    calls: list[object] = []
    now = [100.0]
    cfg = SimpleNamespace(refresh_api_key_hook=None)
    hook = RecheckedHook(calls.append, every=10.0, clock=lambda: now[0])
    for _ in range(5):
        hook(cfg)
    now[0] += 9.9
    hook(cfg)
    assert len(calls) == 1
    now[0] += 0.1
    hook(cfg)
    assert len(calls) == 2
    hook.forget()
    hook(cfg)
    assert len(calls) == 3
