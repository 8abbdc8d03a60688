"""The API's batch routes (docs/batch.md): arrays and dry runs of a submit, groups, hold and release.

    POST /v1/jobs (an `array`)        N members stored in one group commit: {kind: JobList, group, items}
    POST /v1/jobs?dryRun=All          what submit would answer (validated, priced, explained); stores nothing
    GET  /v1/groups                   {items: [{name, tenant, counts, total}]} the caller's visible groups
    GET  /v1/groups/{name}            {name, tenant, counts (by state), total, items (the members' views)}
    POST /v1/groups/{name}/cancel     every live member cancelled: {name, cancelled: [ids], counts}
    POST /v1/groups/{name}/priority   {priorityClass}: the members not placed yet reprioritised
    POST /v1/jobs/{id}/hold|release   a job not placed yet held (PENDING "held by X") or released
    POST /v1/groups/{name}/hold|release   the same for every member that can be
    GET  /v1/tenants                  {items: [{tenant, weight, share, position, quota, used, borrowed, lent,
                                      queued, running, pending}]} (broker.queue.tenant_view); a user sees
                                      its own tenant only, viewers and admins every tenant

A group belongs to a tenant: `?tenant=` names it for admins and viewers (default: the caller's own).
Who may: reading as for jobs, writing as cancel (the job's tenant's users, admins). Owns the wire shapes
and checks; broker.controller.batching does the work.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

import orjson
from fastapi import Depends, FastAPI, Request, Response
from pydantic import Field

from broker.api.audit import note
from broker.api.lists import job_view, queue_bodies
from broker.api.schemas import decision_view, verdict_view
from broker.api.views import FleetViews
from broker.controller.batching import tenant_jobs
from broker.controller.service import BrokerService
from broker.core.errors import Conflict, InvalidRequest, NotFound
from broker.core.model import JobRecord, JobRequest, JobState, Placement
from broker.intake.batch_schemas import array_members
from broker.intake.strict_wire import DNS_LABEL, Wire
from broker.tenancy.auth import Principal, Role

__all__ = ["add_batch_routes", "submit_batch"]


class PrioritySpec(Wire):
    priority_class: str = Field(alias="priorityClass", pattern=DNS_LABEL)


def _counts(jobs: Sequence[JobRecord]) -> dict[str, int]:
    return dict(sorted(Counter(str(j.state) for j in jobs).items()))


def _price(views: FleetViews, request: JobRequest, decision: Placement) -> float | None:
    """The placement's price per hour (its cluster's price per GPU-hour of the product x GPUs)."""
    for s in views.snapshots.current().placeable:
        if s.cluster == decision.cluster:
            per_gpu = s.price_per_gpu_hour.get(decision.product)
            return None if per_gpu is None else round(per_gpu * max(request.total_gpus, 1), 4)
    return None


async def submit_batch(
    request: Request,
    service: BrokerService,
    views: FleetViews,
    store_one: Callable[[Any], Any],
    job_request: JobRequest,
    idempotency_key: str | None,
) -> Response:
    """An array's members stored together, or (dryRun=All) what the submit would answer, storing nothing.
    `store_one(prepared)` is the route's own path for one prepared submit (warnings, group commit)."""
    dry = request.query_params.get("dryRun")
    if dry is not None and dry != "All":
        raise InvalidRequest(
            "dryRun", f"only All is supported (as kubectl's server-side dry run), got {dry!r}"
        )
    members = array_members(job_request)
    keys = (
        [idempotency_key]
        if len(members) == 1
        else [f"{idempotency_key}/{i}" if idempotency_key else None for i in range(len(members))]
    )
    prepared = [service.prepare_submit(m, k) for m, k in zip(members, keys, strict=True)]
    # members a microsecond apart: the queue (age) and the job list take them in index order
    prepared = [(replace(r, created_at=r.created_at + i * 1e-6), e) for i, (r, e) in enumerate(prepared)]
    if dry is not None:
        decision, verdicts = views.explain(members[0])
        items = []
        for record, _ in prepared:
            item = job_view(record)
            item["dryRun"] = True
            items.append(item)
        explained = decision_view(decision)
        explained["clusters"] = [verdict_view(v) for v in verdicts]
        if isinstance(decision, Placement):
            explained["pricePerHour"] = _price(views, members[0], decision)
        body: dict[str, Any] = items[0] if len(items) == 1 else {"kind": "JobList", "items": items}
        body["dryRun"] = True
        body["explain"] = explained
        return Response(orjson.dumps(body), status_code=200, media_type="application/json")
    stored = await asyncio.gather(*(store_one(p) for p in prepared))
    created = any(c for _, c in stored)
    out = {
        "kind": "JobList",
        "apiVersion": "gpufed/v1",
        "group": job_request.batch.group,
        "items": [job_view(r) for r, _ in stored],
    }
    return Response(orjson.dumps(out), status_code=201 if created else 200, media_type="application/json")


def add_batch_routes(
    app: FastAPI,
    service: BrokerService,
    views: FleetViews,
    caller: Callable[..., Any],
    refuse: Callable[[int, str], Exception],
) -> None:
    """The routes above; `caller` authenticates a request, `refuse(code, message)` is its refusal."""
    who = Depends(caller)  # the caller, authenticated (FastAPI resolves local annotations only as defaults)

    def tenant_of(principal: Principal, tenant: str | None) -> str:
        if tenant is None or tenant == principal.tenant:
            return principal.tenant
        if not principal.may_read(tenant):
            raise NotFound(f"tenant {tenant} not found")
        return tenant

    def members(principal: Principal, name: str, tenant: str | None) -> tuple[str, list[JobRecord]]:
        t = tenant_of(principal, tenant)
        return t, service.group_jobs(t, name)

    def may_write(principal: Principal, tenant: str, what: str) -> None:
        if not principal.may_cancel(tenant):
            raise refuse(403, f"{principal.name} is a {principal.role}: it may not {what}")

    @app.get("/v1/tenants")
    def tenants(principal: Principal = who) -> dict[str, Any]:
        """Each visible tenant's quota, use, borrowing, fair-share place and jobs (a user: its own)."""
        own = (principal.tenant,) if principal.role is Role.USER else ()  # a user's own, even idle
        figures = views.tenant_figures(including=own)
        rows = [asdict(f) for f in figures if principal.may_read(f.tenant)]
        return {"kind": "TenantList", "items": rows}

    @app.get("/v1/groups")
    def groups(principal: Principal = who, tenant: str | None = None) -> dict[str, Any]:
        if tenant is None and principal.role is not Role.USER:
            jobs = service.store.list_jobs()
        else:
            jobs = tenant_jobs(service.store, tenant_of(principal, tenant))
        found: dict[tuple[str, str], list[JobRecord]] = {}
        for j in jobs:
            if j.request.batch.group:
                found.setdefault((j.request.tenant, j.request.batch.group), []).append(j)
        items = [
            {"name": g, "tenant": t, "counts": _counts(js), "total": len(js)}
            for (t, g), js in sorted(found.items())
        ]
        return {"kind": "GroupList", "items": items}

    @app.get("/v1/groups/{name}")
    def group(name: str, principal: Principal = who, tenant: str | None = None) -> dict[str, Any]:
        t, jobs = members(principal, name, tenant)
        return {
            "name": name,
            "tenant": t,
            "counts": _counts(jobs),
            "total": len(jobs),
            "items": queue_bodies(views, jobs),
        }

    @app.post("/v1/groups/{name}/cancel")
    def cancel_group(
        name: str,
        request: Request,
        principal: Principal = who,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        note(request, verb="cancel", obj=f"group/{name}")
        t = tenant_of(principal, tenant)
        note(request, tenant=t)
        may_write(principal, t, "cancel jobs")
        cancelled = service.cancel_group(t, name, f"cancelled with its group {name} by {principal.name}")
        return {
            "name": name,
            "tenant": t,
            "cancelled": [r.id for r in cancelled],
            "counts": _counts(service.group_jobs(t, name)),
        }

    @app.post("/v1/groups/{name}/priority")
    def reprioritise(
        name: str,
        body: PrioritySpec,
        request: Request,
        principal: Principal = who,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        note(request, verb="reprioritise", obj=f"group/{name}")
        t = tenant_of(principal, tenant)
        may_write(principal, t, "reprioritise jobs")
        known = service.settings.queue_policy().priorities
        if known and body.priority_class not in known:
            raise InvalidRequest("priorityClass", f"unknown priority class {body.priority_class!r}")
        changed = service.reprioritise_group(t, name, body.priority_class)
        return {"name": name, "tenant": t, "changed": [r.id for r in changed]}

    def _hold_one(principal: Principal, job_id: str, release: bool) -> JobRecord:
        record = service.get(job_id)
        if not principal.may_read(record.request.tenant):
            raise NotFound(f"job {job_id} not found")
        may_write(principal, record.request.tenant, "hold or release jobs")
        if release:
            return service.release_hold(job_id, principal.name)
        return service.hold(job_id, principal.name)

    @app.post("/v1/jobs/{job_id}/hold")
    def hold(
        job_id: str,
        request: Request,
        principal: Principal = who,
    ) -> dict[str, Any]:
        note(request, verb="hold", obj=f"job/{job_id}")
        return job_view(_hold_one(principal, job_id, release=False))

    @app.post("/v1/jobs/{job_id}/release")
    def release(
        job_id: str,
        request: Request,
        principal: Principal = who,
    ) -> dict[str, Any]:
        note(request, verb="release", obj=f"job/{job_id}")
        return job_view(_hold_one(principal, job_id, release=True))

    def _group_holds(principal: Principal, name: str, tenant: str | None, release: bool) -> dict[str, Any]:
        t, jobs = members(principal, name, tenant)
        may_write(principal, t, "hold or release jobs")
        done: list[str] = []
        for j in jobs:
            if (release and j.held_by is None) or (
                not release and j.state not in (JobState.QUEUED, JobState.PENDING)
            ):
                continue
            try:
                _hold_one(principal, j.id, release)
                done.append(j.id)
            except Conflict:
                continue  # placed or ended meanwhile
        return {"name": name, "tenant": t, "released" if release else "held": done}

    @app.post("/v1/groups/{name}/hold")
    def hold_group(
        name: str,
        request: Request,
        principal: Principal = who,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        note(request, verb="hold", obj=f"group/{name}")
        return _group_holds(principal, name, tenant, release=False)

    @app.post("/v1/groups/{name}/release")
    def release_group(
        name: str,
        request: Request,
        principal: Principal = who,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        note(request, verb="release", obj=f"group/{name}")
        return _group_holds(principal, name, tenant, release=True)
