"""The HTTP side of high availability: draining on shutdown and /v1/status.

Drain           a flag set by SIGTERM: from then on every write request (POST, PUT, PATCH, DELETE under
                /v1/, except the dry-run /v1/explain) is answered 503 with Retry-After, so a client
                behind a Service retries on another replica; /readyz says "draining" (the Service
                stops routing here); reads are served until the process exits.
install(app, ...)  adds the drain middleware and GET /v1/status: this replica's role (leader or
                follower), the lease holder and fencing token, whether it is draining, and the report
                of the last rebuild after a Redis loss (what was recovered and what was lost). It names
                every tenant's job ids: a viewer or an admin only (401 without a token, 403 for a user).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from broker.access.caller import AuthError, caller
from broker.core.errors import StoreError
from broker.core.ports import RecoveryStore

_WRITES = {"POST", "PUT", "PATCH", "DELETE"}


class ReplicaRole(Protocol):
    """What /v1/status and /readyz say of this replica's lease: broker.ha.leadership.Leadership in the
    broker process, broker.ha.lease_view.LeaseView in an API process (which never holds the lease)."""

    @property
    def holder(self) -> str: ...
    @property
    def leader(self) -> bool: ...
    @property
    def token(self) -> int | None: ...
    @property
    def error(self) -> str | None: ...
    def readiness(self) -> bool: ...


RETRY_AFTER_SECONDS = 2


class Drain:
    def __init__(self) -> None:
        self.draining = False

    def begin(self) -> None:
        self.draining = True

    def readiness(self) -> bool:
        if self.draining:
            raise RuntimeError("draining: shutting down, send new work to another replica")
        return True


class DrainGuard:
    """The drain check as a plain ASGI middleware: one attribute read per request while serving (a
    `@app.middleware("http")` function wraps every request in tasks and streams, which cost more than
    a whole submit's own work)."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.drain.draining and scope["type"] == "http" and _refused_while_draining(scope):
            response = JSONResponse(
                status_code=503,
                content={"error": "draining", "message": "this broker is shutting down; retry on another"},
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _refused_while_draining(scope: Scope) -> bool:
    path: str = scope.get("path", "")
    return scope.get("method") in _WRITES and path.startswith("/v1/") and path != "/v1/explain"


async def _viewer_or_admin(request: Request) -> None:
    """/v1/status names every tenant's jobs: a viewer or an admin only."""
    if getattr(request.app.state, "tokens", None) is None:  # --insecure-no-auth (every caller an admin)
        return
    principal = await caller(request, request.headers.get("authorization"))
    if not principal.sees_all_tenants:
        raise AuthError(403, f"{principal.name} is a {principal.role}: /v1/status is for viewers and admins")


def install(
    app: FastAPI,
    drain: Drain,
    leadership: ReplicaRole,
    holder_now: Callable[[], str | None],
    store: RecoveryStore,
) -> None:
    app.add_middleware(DrainGuard, drain=drain)

    @app.get("/v1/status", dependencies=[Depends(_viewer_or_admin)])
    def status() -> dict[str, Any]:
        """This replica's role, the lease, and the last recovery after a Redis loss."""
        body: dict[str, Any] = {
            "replica": leadership.holder,
            "role": "leader" if leadership.leader else "follower",
            "token": leadership.token,
            "leaseError": leadership.error,
            "draining": drain.draining,
        }
        try:
            holder = holder_now()
            report = store.recovery_report()
            body["runId"] = store.run_marker()
        except StoreError as exc:
            body["storeError"] = str(exc)
            return body
        body["leader"] = holder.rsplit("|", 1)[0] if holder else None
        body["recovery"] = json.loads(report) if report else None
        return body
