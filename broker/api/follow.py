"""Following jobs over HTTP: server-sent events of job transitions and the container log.

    GET /v1/jobs/{id}/events?watch=1   the job's transitions as SSE (event: transition), oldest first,
                                       then live; the stream ends after the job's terminal transition
    GET /v1/events?watch=1             every job's transitions as SSE, live from now (or from
                                       Last-Event-ID / ?after= to resume)
    GET /v1/jobs/{id}/logs             the container log of the job's current attempt, from its member
                                       cluster (?follow=1&tailLines=N&timestamps=1&pod=NAME); an ended
                                       attempt whose pods are gone (?attempt=N, or the current one after
                                       its Job's finishedJobTtlSeconds): the last lines kept of it
                                       (broker.workload.attempt_log), or 409 saying none was kept

Each SSE message has `id:` (the Redis stream id, so a client resumes with Last-Event-ID), `event:
transition` and `data:` (the EventView JSON plus jobId). Keep-alive comments are sent every 15 s by
sse-starlette. Reads block in a worker thread on the store's read_events (XREAD BLOCK), a second at a
time, so a closed client is noticed within a second; stream reads take worker threads under their own
limiters (STREAMS each), never the API's default one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from broker.api.schemas import EventView
from broker.controller.service import BrokerService
from broker.core.errors import Conflict, NotFound
from broker.core.model import JobEvent, JobRecord
from broker.core.ports import AttemptLogStore, PodLogs
from broker.workload import attempt_log

__all__ = ["TenantFilter", "add_follow_routes", "everyone"]

# Which tenants' jobs a caller may read (None: all of them). Authentication supplies it per request.
TenantFilter = Callable[[str], bool] | None
_TENANT_CACHE = 10_000

BLOCK_MS = 1000
# Long-lived streams block worker threads (XREAD BLOCK, a followed log's next chunk): they take their
# threads under their own limiters, so a crowd of watchers never starves the API's other handlers,
# which share anyio's default limiter.
STREAMS = 256
_DONE = object()


async def _in_threads(chunks: Iterator[bytes], limiter: anyio.CapacityLimiter) -> AsyncIterator[bytes]:
    """A blocking iterator read chunk by chunk in worker threads under the log limiter."""
    try:
        while True:
            chunk = await anyio.to_thread.run_sync(next, chunks, _DONE, limiter=limiter)
            if chunk is _DONE:
                return
            assert isinstance(chunk, bytes)
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            await anyio.to_thread.run_sync(close, limiter=limiter)


def _message(stream_id: str, event: JobEvent) -> ServerSentEvent:
    data = {"jobId": event.job_id, **EventView.of(event).model_dump(by_alias=True)}
    return ServerSentEvent(data=json.dumps(data), event="transition", id=stream_id)


class _Visible:
    """Which jobs' events a caller may see: every job (may_read None), or those of the tenants
    may_read accepts; each job's tenant is read once per stream."""

    def __init__(self, service: BrokerService, may_read: TenantFilter) -> None:
        self.service, self.may_read = service, may_read
        self.tenants: dict[str, str | None] = {}

    def __call__(self, job_id: str) -> bool:
        if self.may_read is None:
            return True
        if job_id not in self.tenants:
            if len(self.tenants) > _TENANT_CACHE:
                self.tenants.clear()
            try:
                self.tenants[job_id] = self.service.get(job_id).request.tenant
            except NotFound:
                self.tenants[job_id] = None
        tenant = self.tenants[job_id]
        return tenant is not None and self.may_read(tenant)


def _allowed(visible: _Visible, job_ids: set[str]) -> set[str]:
    return {j for j in job_ids if visible(j)}


async def _events(
    service: BrokerService,
    request: Request,
    job_id: str | None,
    after: str,
    limiter: anyio.CapacityLimiter,
    visible: _Visible,
) -> AsyncIterator[ServerSentEvent]:
    cursor = after
    if cursor == "$":  # live from now: from the newest id, so nothing falls between two blocking reads
        cursor = await anyio.to_thread.run_sync(service.store.last_event_id, job_id, limiter=limiter)
    if job_id is not None:  # a job's stream: what happened so far, then live, and done at the end
        history = await anyio.to_thread.run_sync(service.store.read_events, job_id, cursor, limiter=limiter)
        for stream_id, event in history:
            cursor = stream_id
            yield _message(stream_id, event)
            if event.state.terminal:
                return
    while not await request.is_disconnected():
        rows = await anyio.to_thread.run_sync(
            service.store.read_events, job_id, cursor, BLOCK_MS, limiter=limiter
        )
        allowed: set[str] = set()
        if job_id is None and visible.may_read is not None:
            allowed = await anyio.to_thread.run_sync(
                _allowed, visible, {e.job_id for _, e in rows}, limiter=limiter
            )
        for stream_id, event in rows:
            cursor = stream_id
            if job_id is None and visible.may_read is not None and event.job_id not in allowed:
                continue
            yield _message(stream_id, event)
            if job_id is not None and event.state.terminal:
                return


def _log_chunks(
    service: BrokerService,
    source: PodLogs,
    job_id: str,
    follow: bool,
    tail: int | None,
    ts: bool,
    pod: str | None,
    attempt: int | None = None,
) -> Iterator[bytes]:
    record = service.get(job_id)
    if attempt is not None and attempt != record.attempt:  # an earlier attempt: only what was kept
        return _kept_log(service, record, attempt, tail, missing=None)
    if record.cluster is None:
        return _kept_log(
            service,
            record,
            record.attempt,
            tail,
            f"job {job_id} is {record.state} and has no pods yet ({record.reason})",
        )
    traits = service.traits.get(record.cluster)
    namespace = traits.namespace_for(record.request.tenant) if traits is not None else "default"
    pods = source.job_pods(record.cluster, namespace, job_id, record.attempt)
    if pod is not None:
        if pod not in pods:
            raise Conflict(f"job {job_id} has no pod {pod!r}; its pods: {', '.join(pods) or 'none yet'}")
        pods = [pod]
    if not pods:
        ttl = service.settings.finished_job_ttl_seconds
        missing = (
            attempt_log.gone(job_id, str(record.state), record.attempt, record.cluster, ttl)
            if record.state.terminal
            else f"job {job_id} has no pods in {record.cluster} yet ({record.state})"
        )
        return _kept_log(service, record, record.attempt, tail, missing)
    if follow:
        pods = pods[:1]  # one live stream; the others with ?pod=NAME

    def chunks() -> Iterator[bytes]:
        for name in pods:
            stream = source.pod_logs(record.cluster or "", namespace, name, follow, tail, ts)
            if len(pods) == 1:
                yield from stream
                continue
            buf = b""
            for chunk in stream:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    yield f"[{name}] ".encode() + line + b"\n"
            if buf:
                yield f"[{name}] ".encode() + buf + b"\n"

    return chunks()


def _kept_log(
    service: BrokerService, record: JobRecord, attempt: int, tail: int | None, missing: str | None
) -> Iterator[bytes]:
    """The log kept of an ended attempt (broker.workload.attempt_log), its last `tail` lines; none kept:
    Conflict with `missing`, or naming the attempts whose logs are kept."""
    store = service.store
    data = store.attempt_log(record.id, attempt) if isinstance(store, AttemptLogStore) else None
    if data is None:
        if missing is None:
            kept = store.attempt_log_numbers(record.id) if isinstance(store, AttemptLogStore) else []
            missing = (
                f"no log of attempt {attempt} of job {record.id} was kept (its attempts so far: "
                f"1..{record.attempt}; logs kept: {', '.join(map(str, kept)) or 'none'})"
            )
        raise Conflict(missing)
    if tail is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail:]) if tail else b""
    return iter([data])


def everyone() -> TenantFilter:
    """The default reader: without authentication every caller sees every tenant's jobs."""
    return None


def add_follow_routes(
    app: FastAPI,
    service: BrokerService,
    logs: PodLogs | None,
    reader: Callable[..., TenantFilter] = everyone,
) -> None:
    """Register the SSE and log routes on the app (the log route answers 404 without a log source).

    `reader` is a FastAPI dependency giving the caller's TenantFilter (None: every tenant); with
    authentication it is built from the caller's token. Another tenant's job is 404 on every route, and
    the fleet stream leaves its events out."""
    caller_reads = Depends(reader)  # a default value: resolved per request by FastAPI

    def readable(job_id: str, may_read: TenantFilter) -> None:
        record = service.get(job_id)
        if may_read is not None and not may_read(record.request.tenant):
            raise NotFound(f"job {job_id} not found")

    event_reads = anyio.CapacityLimiter(STREAMS)  # bound to the app's event loop at first use
    log_reads = anyio.CapacityLimiter(STREAMS)

    def after_of(last_event_id: str | None, after: str | None, default: str) -> str:
        value = after or last_event_id or default
        head, _, tail = value.partition("-")
        if not head.isdigit() or (tail and not tail.isdigit()):
            return default
        return value

    @app.get("/v1/events", response_model=None)
    async def fleet_events(
        request: Request,
        may_read: TenantFilter = caller_reads,
        watch: bool = False,
        after: Annotated[str | None, Query(max_length=64)] = None,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> Any:
        if not watch:
            start = after_of(last_event_id, after, "0-0")
            visible = _Visible(service, may_read)

            def read() -> list[tuple[str, JobEvent]]:
                rows = service.store.read_events(None, start, count=limit)
                return [(sid, e) for sid, e in rows if visible(e.job_id)]

            rows = await anyio.to_thread.run_sync(read)
            return {
                "items": [
                    {"id": sid, "jobId": e.job_id, **EventView.of(e).model_dump(by_alias=True)}
                    for sid, e in rows
                ]
            }
        return EventSourceResponse(
            _events(
                service,
                request,
                None,
                after_of(last_event_id, after, "$"),
                event_reads,
                _Visible(service, may_read),
            )
        )

    @app.get("/v1/jobs/{job_id}/events", response_model=None)
    async def job_events(
        job_id: str,
        request: Request,
        may_read: TenantFilter = caller_reads,
        watch: bool = False,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
    ) -> Any:
        await anyio.to_thread.run_sync(readable, job_id, may_read)  # 404 before the stream starts
        if not watch:
            events = await anyio.to_thread.run_sync(lambda: service.events(job_id))
            return {"items": [EventView.of(e).model_dump(by_alias=True) for e in events]}
        return EventSourceResponse(
            _events(
                service,
                request,
                job_id,
                after_of(last_event_id, None, "0-0"),
                event_reads,
                _Visible(service, None),
            )
        )

    @app.get("/v1/jobs/{job_id}/logs", response_model=None)
    async def job_logs(
        job_id: str,
        may_read: TenantFilter = caller_reads,
        follow: bool = False,
        tail_lines: Annotated[int | None, Query(alias="tailLines", ge=0, le=100_000)] = None,
        timestamps: bool = False,
        pod: Annotated[str | None, Query(max_length=253)] = None,
        attempt: Annotated[int | None, Query(ge=0, le=1_000_000)] = None,
    ) -> StreamingResponse:
        if logs is None:
            raise NotFound("this broker has no log source for member clusters")
        await anyio.to_thread.run_sync(readable, job_id, may_read)
        source = logs
        chunks = await anyio.to_thread.run_sync(
            lambda: _log_chunks(service, source, job_id, follow, tail_lines, timestamps, pod, attempt)
        )
        return StreamingResponse(_in_threads(chunks, log_reads), media_type="text/plain; charset=utf-8")
