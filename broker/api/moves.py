"""The API's moves of running work (docs/migration.md): migrate a job, drain and undrain a cluster.

    POST /v1/jobs/{id}/migrate          {"to": CLUSTER?, "reason": TEXT?}: stop the job's attempt through
                                        its checkpoint path and requeue it for `to` (else anywhere but
                                        where it is); the job's owner (a user of its tenant) or an admin;
                                        409 with the reason when it cannot be moved
    POST /v1/clusters/{name}/drain      {"reason": TEXT?}: admins only; no new work placed there, its
                                        running jobs moved with their checkpoints; the moved job ids back
    POST /v1/clusters/{name}/undrain    admins only; the cluster is offered again

Owns the wire shapes and the permission checks; broker.controller.migrating does the moving.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from pydantic import Field

from broker.api.audit import note
from broker.api.schemas import JobView
from broker.controller.service import BrokerService
from broker.core.errors import NotFound
from broker.intake.strict_wire import Wire
from broker.tenancy.auth import Principal, Role

__all__ = ["DrainSpec", "MigrateSpec", "add_move_routes"]


class MigrateSpec(Wire):
    to: str | None = Field(default=None, min_length=1, max_length=253, description="the target cluster")
    reason: str = Field(default="", max_length=1024)


class DrainSpec(Wire):
    reason: str = Field(default="", max_length=1024)


def add_move_routes(
    app: FastAPI,
    service: BrokerService,
    caller: Callable[..., Any],
    refuse: Callable[[int, str], Exception],
) -> None:
    """The routes above; `caller` authenticates a request, `refuse(code, message)` is its refusal."""

    @app.post("/v1/jobs/{job_id}/migrate")
    def migrate(
        job_id: str,
        request: Request,
        body: MigrateSpec | None = None,
        principal: Principal = Depends(caller),  # noqa: B008 (a local dependency: not resolvable by name)
    ) -> dict[str, Any]:
        spec = body or MigrateSpec()
        note(request, verb="migrate", obj=f"job/{job_id}")
        record = service.get(job_id)
        if not principal.may_read(record.request.tenant):
            raise NotFound(f"job {job_id} not found")
        note(request, tenant=record.request.tenant)
        if not principal.may_cancel(record.request.tenant):
            raise refuse(403, f"{principal.name} is a {principal.role}: it may not move jobs")
        moved = service.migrate_job(
            job_id, to_cluster=spec.to, reason=spec.reason or "asked", by=principal.name
        )
        return JobView.of(moved).model_dump(by_alias=True)

    @app.post("/v1/clusters/{name}/drain")
    def drain(
        name: str,
        request: Request,
        body: DrainSpec | None = None,
        principal: Principal = Depends(caller),  # noqa: B008
    ) -> dict[str, Any]:
        note(request, verb="drain", obj=f"cluster/{name}")
        if principal.role is not Role.ADMIN:
            raise refuse(403, f"{principal.name} is a {principal.role}: only admins drain clusters")
        moved = service.drain_cluster(name, reason=(body or DrainSpec()).reason, by=principal.name)
        return {"cluster": name, "drained": True, "moved": [r.id for r in moved]}

    @app.post("/v1/clusters/{name}/undrain")
    def undrain(
        name: str,
        request: Request,
        principal: Principal = Depends(caller),  # noqa: B008
    ) -> dict[str, Any]:
        note(request, verb="undrain", obj=f"cluster/{name}")
        if principal.role is not Role.ADMIN:
            raise refuse(403, f"{principal.name} is a {principal.role}: only admins undrain clusters")
        was = service.undrain_cluster(name)
        return {"cluster": name, "drained": False, "wasDrained": was}
