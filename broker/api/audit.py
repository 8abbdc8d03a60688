"""The API's side of the audit trail: what is recorded for each request, and `GET /v1/audit`.

AuditMiddleware   records, after the response, one AuditRecord (broker.tenancy.audit) for every write
                  (POST, PUT, PATCH, DELETE under /v1, except the dry run POST /v1/explain) and for every
                  refused call (401, 403) whatever its method: who (the caller the route authenticated,
                  else system:anonymous), the verb and object the route named with `note(...)` (else the
                  method and path), the outcome from the status, the reason from the error body, the
                  client's address and the trace id (the job's, else the request's traceparent).
note(request, ...) what a route tells the middleware: verb, object, the tenant the act concerns, trace id.
add_audit_routes  GET /v1/audit (admins and viewers): ?subject= &verb= &tenant= &outcome= &since= &until=
                  (seconds since the epoch) &limit= (1..1000, default 100) &continue=; newest first, as a
                  Kubernetes list: {"kind": "AuditRecordList", "apiVersion": "gpufed.io/v1",
                  "metadata": {"continue": "..."}, "items": [{"id": ..., "time": ..., ...}]}; `continue`
                  only while older records may match.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request

from broker import telemetry
from broker.api.audit_writer import AuditWriter
from broker.core.errors import InvalidRequest, NotFound
from broker.tenancy.audit import (
    ANONYMOUS,
    OUTCOMES,
    AuditLog,
    AuditQuery,
    AuditRecord,
    decode_continue,
    encode_continue,
    outcome_of,
)
from broker.tenancy.auth import Principal, Role

__all__ = ["AuditMiddleware", "add_audit_routes", "note"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

WRITES = ("POST", "PUT", "PATCH", "DELETE")
NOT_WRITES = ("/v1/explain",)  # a dry run changes nothing
_MAX_BODY = 8192


def note(
    request: Request,
    verb: str | None = None,
    obj: str | None = None,
    tenant: str | None = None,
    trace_id: str | None = None,
) -> None:
    """What the route did, for its audit record (only what is given is set)."""
    state: dict[str, Any] = request.scope.setdefault("state", {})
    for key, value in (
        ("audit_verb", verb),
        ("audit_object", obj),
        ("audit_tenant", tenant),
        ("audit_trace", trace_id),
    ):
        if value is not None:
            state[key] = value


def _reason(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    return str(doc.get("message", "")) if isinstance(doc, dict) else ""


class AuditMiddleware:
    def __init__(self, app: ASGIApp, writer: AuditWriter) -> None:
        self.app, self.writer = app, writer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        status = 500
        body = bytearray()

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and status >= 400 and len(body) < _MAX_BODY:
                body.extend(message.get("body", b"")[: _MAX_BODY - len(body)])
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            self._record(scope, state, status, bytes(body))

    def _record(self, scope: Scope, state: dict[str, Any], status: int, body: bytes) -> None:
        method, path = str(scope.get("method", "")), str(scope.get("path", ""))
        write = method in WRITES and path not in NOT_WRITES
        if not write and status not in (401, 403):
            return
        principal: Principal | None = state.get("principal")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope.get("client")
        self.writer.record(
            AuditRecord(
                at=time.time(),
                subject=principal.name if principal is not None else ANONYMOUS,
                tenant=str(state.get("audit_tenant") or (principal.tenant if principal is not None else "")),
                role=str(principal.role) if principal is not None else "",
                verb=str(state.get("audit_verb") or (method.lower() if write else "read")),
                object=str(state.get("audit_object") or path),
                outcome=outcome_of(status),
                code=status,
                reason=_reason(body) if status >= 400 else "",
                source_address=str(client[0]) if client else "",
                trace_id=str(
                    state.get("audit_trace") or telemetry.trace_id_of(headers.get("traceparent")) or ""
                ),
            )
        )


def add_audit_routes(
    app: FastAPI,
    log: AuditLog | None,
    caller: Callable[..., Any],
    refuse: Callable[[int, str], Exception],
) -> None:
    """GET /v1/audit over `log` (404 when the broker keeps no trail); `caller` is the
    API's dependency that authenticates a request, `refuse(code, message)` its refusal (a Status)."""

    @app.get("/v1/audit")
    def audit(
        subject: str | None = None,
        verb: str | None = None,
        tenant: str | None = None,
        outcome: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cont: Annotated[str | None, Query(alias="continue")] = None,
        principal: Principal = Depends(caller),  # noqa: B008 (a local dependency: not resolvable by name)
    ) -> dict[str, Any]:
        if principal.role not in (Role.ADMIN, Role.VIEWER):
            raise refuse(
                403, f"{principal.name} is a {principal.role}: the audit trail is for admins and viewers"
            )
        if outcome is not None and outcome not in OUTCOMES:
            raise InvalidRequest("outcome", f"one of {', '.join(OUTCOMES)}")
        if log is None:
            raise NotFound("this broker keeps no audit trail")
        query = AuditQuery(subject, verb, tenant, outcome, since, until)
        try:
            after = decode_continue(cont, query) if cont else None
        except ValueError as e:
            raise InvalidRequest("continue", str(e)) from None
        rows, more = log.page(query, limit, after)
        metadata: dict[str, Any] = {}
        if more is not None:
            metadata["continue"] = encode_continue(more, query)
        return {
            "kind": "AuditRecordList",
            "apiVersion": "gpufed.io/v1",
            "metadata": metadata,
            "items": [{"id": entry_id, **record.to_dict()} for entry_id, record in rows],
        }
