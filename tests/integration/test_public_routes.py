"""Which routes answer without a token (issue 21, case 4): an audit of the whole app, as the broker builds
it (create_app + the HA routes), with auth on.

Every route the app serves is called without a token; exactly the routes in PUBLIC answer, every other
one is 401. A route added later without authentication fails this test until it is listed here (and
docs/operations.md says why it is public). /v1/status names every tenant's recovered and lost jobs:
a viewer or an admin reads it, a user is 403.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from adapters.redis_lease import RedisLease
from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from broker.ha import drain
from broker.ha.leadership import Leadership
from tests.integration.test_tenancy import TOKENS, Api
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

# (method, path) that answer without a token, and why:
PUBLIC = {
    ("GET", "/healthz"),  # the kubelet's liveness probe
    ("GET", "/readyz"),  # the kubelet's readiness probe, and a Service's
    ("GET", "/metrics"),  # Prometheus scrapes without a token (aggregates: no job ids, no tokens)
    ("GET", "/"),  # the dashboard's page; its data comes from /v1 with the user's token
    ("GET", "/ui"),  # the dashboard's static files (mount)
    ("GET", "/openapi.json"),  # the API's description
    ("GET", "/docs"),
    ("GET", "/docs/oauth2-redirect"),
    ("GET", "/redoc"),
}


def write_tokens(directory: Path) -> Path:
    """A tokens file with a user (alice), an admin (root) and a viewer (watcher): test_tenancy's tokens."""
    path = directory / "tokens.yaml"
    path.write_text(
        yaml.safe_dump(
            [
                {"name": "alice", "tenant": "ml-research", "role": "user", "token": TOKENS["alice"]},
                {"name": "root", "tenant": "ops", "role": "admin", "token": TOKENS["root"]},
                {"name": "watcher", "tenant": "ops", "role": "viewer", "token": TOKENS["watcher"]},
            ]
        )
    )
    return path


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[Api]:
    tokens = write_tokens(tmp_path)
    store = RedisStateStore(redis_url, prefix="routes" + uuid.uuid4().hex[:8])
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    built = Api(service, tokens)
    lease = RedisLease(redis_url, store.prefix, "replica-r", 5.0)
    leadership = Leadership(lease, lambda: None, lambda: None)
    drain.install(built.app, drain.Drain(), leadership, lease.holder_now, store)
    yield built
    lease.close()
    store.close()


def _routes(api: Api) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for route in api.app.routes:
        if isinstance(route, Mount):
            out.append(("GET", route.path))
        elif isinstance(route, APIRoute | Route):
            out += [(m, route.path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return out


def test_only_the_listed_routes_answer_without_a_token(api: Api) -> None:
    answered: set[tuple[str, str]] = set()
    for method, path in _routes(api):
        concrete = re.sub(r"\{[^}]+\}", "x", path) + ("/index.html" if path == "/ui" else "")
        r = api.call(None, method, concrete, json={} if method in ("POST", "PUT", "PATCH") else None)
        if r.status_code != 401:
            answered.add((method, path))
    assert answered == PUBLIC


def test_status_is_for_viewers_and_admins(api: Api) -> None:
    assert api.call(None, "GET", "/v1/status").status_code == 401
    assert api.call("alice", "GET", "/v1/status").status_code == 403  # a user of one tenant
    for who in ("watcher", "root"):
        r = api.call(who, "GET", "/v1/status")
        assert r.status_code == 200, r.text
        assert r.json()["replica"] == "replica-r"


def test_the_dashboard_answers_under_ui_too(api: Api) -> None:
    page = api.call(None, "GET", "/").text
    r = api.call(None, "GET", "/ui/")  # where /ui redirects: the page, not a 404
    assert r.status_code == 200 and r.text == page and "/ui/app.js" in page
