"""The API's job list: GET /v1/jobs, paged as Kubernetes lists are.

    GET /v1/jobs?limit=N&continue=TOKEN&state=S&tenant=T&cluster=C&name=X
        {"kind": "JobList", "items": [...], "metadata": {"continue": TOKEN}}

Jobs come oldest first, in submission order (broker.core.job_list). Without `limit` every match comes in one
answer; with it, at most `limit` per page and `metadata.continue` (absent on the last page) fetches the
next. Following the tokens returns every job exactly once while jobs are submitted and change state.
A filtered page may hold fewer than `limit` jobs (even none) and still carry a token: a page reads a
bounded part of the index, so its cost does not grow with the jobs the broker holds.

Filters: `state` (repeat for several), `tenant`, `cluster`, `name` (exact). A user lists its own tenant
only (another tenant's jobs do not exist for it: a `tenant` filter naming another answers no jobs);
admins and viewers list every tenant. Errors name the field: `limit` out of 1..MAX_LIMIT is 422, a
`continue` token this server did not make for this list is 400.

A queued job carries its queuePosition and queueReason and its predicted on-prem start. A page is
encoded from the records' stored JSON documents without building JobRecords, and the encoded items
of jobs that are not queued are kept by job id while the store's change stream says they are current
(broker.api.list_items, KeptItems): a page of unchanged jobs reads ids, not records.

Owns the list's query parsing and its answer; reads jobs through the JobLister port only.
(No `from __future__ import annotations`: the route's dependency on `caller` is a local FastAPI must resolve.)
"""

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse

from broker.api.burst import prediction_view
from broker.api.list_items import encode_page
from broker.api.views import FleetViews
from broker.core.job_list import MAX_LIMIT, BadContinue, JobQuery, KeptItems, decode_continue, encode_continue
from broker.core.model import JobRecord, JobState
from broker.core.ports import JobLister
from broker.queue import queueing
from broker.tenancy.auth import Principal, Role

__all__ = ["add_list_routes", "job_body", "job_view", "queue_bodies"]


def job_view(r: JobRecord) -> dict[str, Any]:
    """broker.api.schemas.JobView's shape (JobView.of(r).model_dump(by_alias=True)), built directly: the
    model's construction and dump cost ~60 us a job, and a page holds up to 500 of them
    (tests/unit/test_job_list.py checks both give the same). A list page reads the same view straight
    from the stored document (broker.api.list_items.view_of_doc): a field added here goes there too
    (tests/unit/test_list_items.py compares them byte for byte)."""
    req = r.request
    p = r.placement
    trace = r.trace_parent.split("-") if r.trace_parent else ()
    return {
        "id": r.id,
        "name": req.name,
        "tenant": req.tenant,
        "state": str(r.state),
        "reason": r.reason,
        "attempt": r.attempt,
        "cluster": r.cluster,
        "workload": r.workload_name,
        "placement": None
        if p is None
        else {
            "cluster": p.cluster,
            "product": p.product,
            "resourceName": p.resource_name,
            "unitsPerPod": p.units_per_pod,
            "pods": p.pods,
            "score": p.score,
            "scores": dict(p.scores),
            "migProfile": p.mig_profile,
            "burst": p.burst,
            "clique": p.clique,
            "dra": p.dra,  # the pods ask through a ResourceClaimTemplate (the kind chosen for this job)
        },
        "createdAt": r.created_at,
        "updatedAt": r.updated_at,
        "request": {
            "gpus": req.gpus_per_pod,
            "pods": req.pods,
            "gpuProducts": list(req.gpu_products),
            "migProfile": req.mig_profile,
            "migNeedGB": req.mig_need.memory_gb if req.mig_need else None,
            "numaAligned": req.numa_aligned,
            "allowBurst": req.allow_burst,
            "maxWaitSeconds": req.max_wait_seconds,
            "failover": str(req.failover),
            "onImagePullFailure": str(req.on_image_pull_failure),
            "image": req.image,
            "command": list(req.command),
            "args": list(req.args),
            "env": [dict(e) for e in req.env],
            "labels": dict(req.labels),
            "priorityClass": req.priority_class,
            "nvlinkClique": str(req.nvlink_clique),
            "checkpointGraceSeconds": req.checkpoint_grace_seconds,
        },
        "traceId": trace[1] if len(trace) == 4 else None,
        "warnings": list(r.warnings),
        "source": req.source or None,
        "resumeFrom": r.resume_from,
        "group": req.batch.group or None,  # docs/batch.md
        "dependsOn": [{d.kind: d.ref, "when": str(d.when)} for d in req.batch.depends_on],
        "heldBy": r.held_by,
    }


def job_body(record: JobRecord, slots: Mapping[str, queueing.Slot]) -> dict[str, Any]:
    """A job as the API shows it, with its place in the queue when queued."""
    body = job_view(record)
    slot = slots.get(record.id)
    body["queuePosition"] = slot.position if slot is not None else None
    body["queueReason"] = slot.reason if slot is not None else None
    return body


def queue_bodies(views: FleetViews, records: Sequence[JobRecord], wait: bool = True) -> list[dict[str, Any]]:
    """Job bodies with the queue's view of the queued ones (positions, predicted starts); wait=False
    (a list page): the last queue view, not one computed for this request (broker.api.views)."""
    queued = [r.id for r in records if r.state is JobState.QUEUED]
    slots = views.queue_slots(queued, wait) if queued else {}
    items = [job_body(r, slots) for r in records]
    if queued:  # when each would start on-prem (docs/burst.md); computed at most once a second
        predicted = views.queue_predictions(queued, wait)
        for body in items:
            if body["state"] == JobState.QUEUED.value:
                body.update(prediction_view(predicted.get(body["id"])))
    return items


def add_list_routes(app: FastAPI, views: FleetViews, jobs: JobLister, caller: Callable[..., Any]) -> None:
    """GET /v1/jobs over `jobs`; `caller` is the app's authentication dependency."""
    kept = KeptItems()  # the encoded items of jobs not queued, current up to its cursor
    kept_lock = threading.Lock()

    def queue(ids: list[str]) -> tuple[Mapping[str, queueing.Slot], dict[str, dict[str, Any]]]:
        """The queued jobs' slots and predicted starts, from the last queue view (a page never waits)."""
        slots = views.queue_slots(ids, False)
        predicted = views.queue_predictions(ids, False)
        return slots, {i: prediction_view(predicted.get(i)) for i in ids}

    @app.exception_handler(BadContinue)
    async def _bad_continue(_: Request, exc: BadContinue) -> JSONResponse:
        return JSONResponse(
            status_code=400,
            content={
                "error": "bad-request",
                "message": str(exc),
                "fields": [{"field": exc.field, "message": exc.detail}],
            },
        )

    @app.get("/v1/jobs", response_model=None)
    def list_jobs(
        principal: Annotated[Principal, Depends(caller)],
        state: Annotated[list[JobState] | None, Query()] = None,
        tenant: Annotated[str | None, Query(max_length=253)] = None,
        cluster: Annotated[str | None, Query(max_length=253)] = None,
        name: Annotated[str | None, Query(max_length=253)] = None,
        limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT)] = None,
        continue_: Annotated[str | None, Query(alias="continue", max_length=2048)] = None,
    ) -> Response:
        if principal.role is Role.USER:
            if tenant is not None and tenant != principal.tenant:
                return _answer([], None)  # another tenant's jobs do not exist for a user
            tenant = principal.tenant
        query = JobQuery(
            states=tuple(dict.fromkeys(state or ())),
            tenant=tenant,
            cluster=cluster,
            name=name,
            limit=limit,
        )
        after = decode_continue(query, continue_) if continue_ else None
        with kept_lock:  # one page at a time keeps and drops items (see KeptItems)
            page = jobs.page_job_docs(query, after, kept)
            token = encode_continue(query, page.next_after) if page.next_after is not None else None
            body = encode_page(page, token, queue, kept)
        return Response(body, media_type="application/json")


def _answer(items: list[dict[str, Any]], token: str | None) -> Response:
    metadata: dict[str, Any] = {} if token is None else {"continue": token}
    body = {"kind": "JobList", "apiVersion": "gpufed/v1", "metadata": metadata, "items": items}
    return Response(orjson.dumps(body), media_type="application/json")
