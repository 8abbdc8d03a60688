"""Groups, dependencies and holds (docs/batch.md): the service's side of broker.core.batch.

Owns
    prepare_batch(record)   at submit: each dependsOn resolved (a job by id or by name, the newest of
                            that name in the tenant; a group to its members now), an unknown one or a
                            cycle refused (InvalidRequest, 422), and a job that must wait made PENDING
                            with "waiting for ..." (it is not placed, nor counted against any quota)
    release_dependents()    the control loop's step: every PENDING job that is not held is judged
                            (broker.core.batch.dependency_verdict): met -> QUEUED; never to be met ->
                            FAILED "dependency failed: ..." without running; else its reason kept current
    hold / release_hold     `gpufed hold/release`: a job not placed yet becomes PENDING "held by X";
                            released, it is judged again by the next pass
    group_jobs / cancel_group   a tenant's group: its jobs (any state), and cancelling the live ones

Dependencies live in the request (JobRequest.batch), so they are in the store's record and in every
member object's request annotation (broker.ha.recovery rebuilds them); a PENDING job has no member
object, and survives a store rebuild through the leader's memory (recovery restores it PENDING).
Service layer: the StateStore port only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from broker.controller.base import ControllerBase
from broker.core import batch
from broker.core.errors import Conflict, InvalidRequest, NotFound
from broker.core.job_list import MAX_LIMIT, JobQuery
from broker.core.model import JobRecord, JobState
from broker.core.ports import StateStore

__all__ = ["Batching", "tenant_jobs"]

log = logging.getLogger(__name__)

_LIVE = (JobState.PENDING, JobState.QUEUED, JobState.PLACED, JobState.ADMITTED, JobState.RUNNING)
_HOLDABLE = (JobState.QUEUED, JobState.PENDING)


def tenant_jobs(store: StateStore, tenant: str) -> list[JobRecord]:
    """Every job of a tenant, oldest first (the store's tenant index, page by page)."""
    out: list[JobRecord] = []
    after: str | None = None
    while True:
        page = store.page_jobs(JobQuery(tenant=tenant, limit=MAX_LIMIT), after)
        out.extend(page.items)
        after = page.next_after
        if after is None:
            return out


class Batching(ControllerBase):
    # ------------------------------------------------------------------ submit

    def prepare_batch(self, record: JobRecord) -> JobRecord:
        """The record as it is to be stored: its dependencies resolved, PENDING if it must wait."""
        deps = record.request.batch.depends_on
        if not deps:
            return record
        tenant = record.request.tenant
        own = batch.find_cycle(record.request.batch.group, deps, {}, {})
        if own is not None:  # waiting for its own group: for itself
            raise InvalidRequest("dependsOn", f"a cycle: {own}")
        jobs = tenant_jobs(self.store, tenant)
        by_id = {j.id: j for j in jobs}
        resolved: list[batch.Dependency] = []
        for i, dep in enumerate(deps):
            if dep.kind == "job":
                target = by_id.get(dep.ref)
                if target is None:
                    named = [j for j in jobs if j.request.name == dep.ref]
                    target = max(named, key=lambda j: (j.created_at, j.id)) if named else None
                if target is None:
                    raise InvalidRequest(f"dependsOn[{i}].job", f"no job {dep.ref!r} in tenant {tenant}")
                resolved.append(replace(dep, ids=(target.id,)))
            else:
                ids = tuple(j.id for j in jobs if j.request.batch.group == dep.ref)
                if not ids:
                    raise InvalidRequest(f"dependsOn[{i}].group", f"no group {dep.ref!r} in tenant {tenant}")
                resolved.append(replace(dep, ids=ids))
        waiting = {j.id: j.request.batch.depends_on for j in jobs if j.state is JobState.PENDING}
        cycle = batch.find_cycle(record.request.batch.group, resolved, waiting, _members(jobs))
        if cycle is not None:
            raise InvalidRequest("dependsOn", f"a cycle: {cycle}")
        request = replace(record.request, batch=replace(record.request.batch, depends_on=tuple(resolved)))
        states = {j.id: j.state for j in jobs}
        verdict = batch.dependency_verdict(resolved, states, _members(jobs))
        if isinstance(verdict, batch.Never):
            raise InvalidRequest("dependsOn", f"can never be met: {verdict.reason}")
        if verdict is None:
            return replace(record, request=request)
        return replace(record, request=request, state=JobState.PENDING, reason=verdict.reason)

    # ------------------------------------------------------------------ the control loop's step

    def dependents_due(self) -> bool:
        """Whether a pass that nothing woke must look at the held jobs: some wait for their dependencies."""
        return not self.records.built or self.records.count(JobState.PENDING) > 0

    def release_dependents(self) -> list[JobRecord]:
        """Judge every PENDING job that is not held; returns the jobs that changed."""
        pending = [r for r in self.records.in_states([JobState.PENDING]) if r.held_by is None]
        if not pending:
            return []
        wanted = {i for r in pending for d in r.request.batch.depends_on for i in d.ids}
        states: dict[str, JobState | None] = {}
        missing: list[str] = []
        for job_id in wanted:
            known = self.records.get(job_id)
            if known is not None:
                states[job_id] = known.state
            else:
                missing.append(job_id)
        if missing:
            found = self.store.get_jobs(missing)
            for job_id in missing:
                states[job_id] = found[job_id].state if job_id in found else None
        live = self.records.in_states(_LIVE, ordered=False)
        for r in live:
            states[r.id] = r.state
        members_by_tenant: dict[str, dict[str, list[str]]] = {}
        for r in live:
            if r.request.batch.group:
                members_by_tenant.setdefault(r.request.tenant, {}).setdefault(
                    r.request.batch.group, []
                ).append(r.id)
        changed: list[JobRecord] = []
        for record in pending:
            members = members_by_tenant.get(record.request.tenant, {})
            verdict = batch.dependency_verdict(record.request.batch.depends_on, states, members)
            try:
                if verdict is None:
                    why = "dependencies met: " if record.request.batch.depends_on else ""
                    queued = f"{why}waiting for placement"
                    changed.append(self._transition(record, JobState.QUEUED, queued, JobState.PENDING))
                    self.work.wake()
                elif isinstance(verdict, batch.Never):
                    changed.append(
                        self._transition(record, JobState.FAILED, verdict.reason, JobState.PENDING)
                    )
                elif verdict.reason != record.reason:
                    changed.append(
                        self._save(replace(record, reason=verdict.reason, updated_at=self.clock.now()))
                    )
            except Conflict:
                continue  # held, cancelled or released meanwhile: judged again next pass
        return changed

    # ------------------------------------------------------------------ hold and release

    def hold(self, job_id: str, by: str) -> JobRecord:
        """A job not placed yet is held: PENDING "held by BY" until released (Conflict otherwise)."""
        record = self.get(job_id)
        if record.state not in _HOLDABLE:
            raise Conflict(f"job {job_id} is {record.state}: only a job not yet placed can be held")
        if record.held_by is not None:
            return record
        return self._transition(replace(record, held_by=by), JobState.PENDING, f"held by {by}", record.state)

    def release_hold(self, job_id: str, by: str) -> JobRecord:
        """A held job released: PENDING until the next pass judges its dependencies (then QUEUED)."""
        record = self.get(job_id)
        if record.held_by is None:
            raise Conflict(f"job {job_id} is not held")
        released = self._transition(
            replace(record, held_by=None), JobState.PENDING, f"released by {by}", JobState.PENDING
        )
        self.work.wake()
        return released

    # ------------------------------------------------------------------ groups

    def group_jobs(self, tenant: str, group: str) -> list[JobRecord]:
        """The jobs of a tenant's group, oldest first (NotFound: no such group)."""
        jobs = [j for j in tenant_jobs(self.store, tenant) if j.request.batch.group == group]
        if not jobs:
            raise NotFound(f"group {group} not found")
        return jobs

    def cancel_group(self, tenant: str, group: str, reason: str) -> list[JobRecord]:
        """Cancel every live member of a group; the members cancelled (others already ended)."""
        out: list[JobRecord] = []
        for job in self.group_jobs(tenant, group):
            if job.state.terminal:
                continue
            try:
                out.append(self.cancel(job.id, reason))
            except Conflict:
                continue  # it ended meanwhile
        return out

    def reprioritise_group(self, tenant: str, group: str, priority_class: str) -> list[JobRecord]:
        """The members not placed yet get `priority_class` (Armada's job-set reprioritise)."""
        out: list[JobRecord] = []
        for job in self.group_jobs(tenant, group):
            if job.state not in _HOLDABLE or job.request.priority_class == priority_class:
                continue
            changed = replace(job, request=replace(job.request, priority_class=priority_class))
            try:
                out.append(self._save(replace(changed, updated_at=self.clock.now())))
            except Conflict:
                continue  # placed meanwhile: it keeps the priority it was placed with
        if out:
            self.work.wake()
        return out

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:  # BrokerService's
        raise NotImplementedError

    def get(self, job_id: str) -> JobRecord:  # BrokerService's
        raise NotImplementedError


def _members(jobs: Iterable[JobRecord]) -> dict[str, list[str]]:
    """Per group, its live members."""
    out: dict[str, list[str]] = {}
    for j in jobs:
        if j.request.batch.group and not j.state.terminal:
            out.setdefault(j.request.batch.group, []).append(j.id)
    return out
