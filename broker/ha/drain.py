"""The HTTP side of high availability: draining on shutdown and /v1/status.

Drain           a flag set by SIGTERM: from then on every write request (POST, PUT, PATCH, DELETE under
                /v1/, except the dry-run /v1/explain) is answered 503 with Retry-After, so a client
                behind a Service retries on another replica; /readyz says "draining" (the Service
                stops routing here); reads are served until the process exits.
install(app, ...)  adds the drain middleware and GET /v1/status: this replica's role (leader or
                follower), the lease holder and fencing token, whether it is draining, and the report
                of the last rebuild after a Redis loss (what was recovered and what was lost).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from broker.core.errors import StoreError
from broker.core.ports import RecoveryStore
from broker.ha.leadership import Leadership

_WRITES = {"POST", "PUT", "PATCH", "DELETE"}
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


def install(
    app: FastAPI,
    drain: Drain,
    leadership: Leadership,
    holder_now: Callable[[], str | None],
    store: RecoveryStore,
) -> None:
    @app.middleware("http")
    async def _refuse_while_draining(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        if drain.draining and request.method in _WRITES and path.startswith("/v1/") and path != "/v1/explain":
            return JSONResponse(
                status_code=503,
                content={"error": "draining", "message": "this broker is shutting down; retry on another"},
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        return await call_next(request)

    @app.get("/v1/status")
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
