"""The leader's hub duty: hub objects with spec.managedBy gpufed.io/broker become jobs, and their status
comes back (docs/hub.md; MultiKueue's convention).

Owns `HubSync`, which acts only while this replica holds the leader lease (broker.ha.leadership):
    submit        each managed hub object once, through the entry point of `POST /v1/jobs` with a manifest
                  body (broker.intake.parse.submission_request, then BrokerService.submit), as the tenant its namespace
                  maps to, with the hub object's uid as the idempotency key: a restart, a new leader or a
                  second replica finds the same job, never a second one. The job's `source` is the hub
                  object ("hub:jobs.batch/<ns>/<name>"), shown by GET /v1/jobs/{id}.
    refuse        a hub object the broker cannot take: a Warning Event (reason Refused) and a Failed
                  condition (reason GpufedRefused) on the hub object, the message naming the field; not
                  submitted again until the object changes (its generation)
    write back    on every change of the job (the broker's change stream P:changes, read here as the
                  change feed reads it, and the member's status changes the gateway reports): the annotations
                  gpufed.io/job-id, gpufed.io/state and gpufed.io/cluster, and the status subresource
                  mirrored from the member object's .status (broker.workload.hub_objects.hub_status);
                  while the job is held queued, a gpufed.io/Queued condition with the queue's reason, and
                  a Normal Event (reason Queued) each time that reason changes more than its numbers
    cancel        a hub object deleted (a watch DELETED, or a relist without it) cancels its job; every
                  reconcileSeconds, and on taking the lease, non-terminal jobs whose hub object is no
                  longer on the hub are cancelled (deletes missed while no broker watched), but only for
                  kinds whose hub cache is synced (an unreachable hub cancels nothing)

The hub's I/O is a port (HubPort: adapters.hub_watcher.HubWatcher); the member objects are read through
`member_status` (the gateway). Threads: one worker (the decisions and writes, one object at a time) and
one change reader; the informers call in from theirs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from fastapi.exceptions import RequestValidationError

from broker import telemetry
from broker.controller.service import BrokerService
from broker.core.errors import ClusterError, Conflict, GpufedError, InvalidRequest, NotFound, StoreError
from broker.core.model import JobRecord, JobState
from broker.intake.parse import first_problem, submission_request
from broker.tenancy.audit import AuditRecord
from broker.workload import hub_objects as hub
from broker.workload import k8s_job

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (plural.group, namespace, name)
# (cluster, apiVersion, kind, namespace, name) -> the member object's .status ({} without one), None
# when there is no such object
MemberStatus = Callable[[str, str, str, str, str], Mapping[str, Any] | None]
_RETRY_SECONDS = 2.0
_RETRY_MAX_SECONDS = 60.0
_ACTIVE = [s for s in JobState if not s.terminal]


class HubPort(Protocol):
    """The hub cluster as HubSync needs it (adapters.hub_watcher.HubWatcher)."""

    def synced(self, kind: hub.WatchedKind) -> bool: ...

    def objects(self) -> list[tuple[hub.WatchedKind, Obj]]: ...

    def get(self, kind: hub.WatchedKind, namespace: str, name: str) -> Obj | None: ...

    def write(
        self,
        kind: hub.WatchedKind,
        namespace: str,
        name: str,
        annotations: Mapping[str, str],
        status: Mapping[str, Any] | None,
    ) -> bool: ...

    def event(
        self, kind: hub.WatchedKind, obj: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None: ...


def _owns(record: JobRecord, ref: hub.HubRef) -> bool:
    """The job was submitted for this very hub object (its source, and its uid as the idempotency key)."""
    key = record.idempotency_key or ""
    return record.request.source == ref.source and key.split("/", 1)[-1] == ref.uid


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class HubSync:
    def __init__(
        self,
        service: BrokerService,
        port: HubPort,
        member_status: MemberStatus,
        leader: Callable[[], bool],
        tenant_mapping: Mapping[str, str] | None = None,
        reconcile_seconds: float = 60.0,
        audit: Callable[[AuditRecord], None] | None = None,
    ) -> None:
        """`audit`: where the hub's acts go (the API's audit trail: broker.api.audit_writer.AuditWriter)."""
        self.service = service
        self.audit = audit
        self.port = port
        self.member_status = member_status
        self.leader = leader
        self.tenant_mapping = dict(tenant_mapping or {})
        self.reconcile_seconds = reconcile_seconds
        self.submitted = 0  # jobs this HubSync created (a seen uid returns its first job and counts not)
        self.idle_passes = 0  # worker passes made as a follower (nothing done)
        self._lock = threading.Lock()
        self._dirty: dict[Key, float] = {}  # hub object -> not before (monotonic)
        self._deleted: list[tuple[hub.WatchedKind, Obj]] = []
        self._jobs: dict[str, Key] = {}  # job id -> its hub object
        self._uids: dict[str, str] = {}  # hub object uid -> job id
        self._refused: dict[str, object] = {}  # uid -> the generation refused
        self._failures: dict[Key, int] = {}  # hub object -> failed syncs in a row (the worker's own)
        self._was_leader = False
        self._next_reconcile = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ callbacks (other threads)

    def hub_event(self, kind: hub.WatchedKind, type_: str, obj: Obj) -> None:
        """An informer saw a managed hub object added, changed or deleted."""
        ref = hub.ref_of(obj, kind)
        if ref is None:
            return
        with self._lock:
            if type_ == "DELETED":
                self._deleted.append((kind, obj))
                self._dirty.pop(ref.key, None)
            else:  # which job it is, is trusted only once sync_object has checked it (_owns)
                self._dirty.setdefault(ref.key, 0.0)
        self._wake.set()

    def job_changed(self, job_id: str) -> None:
        """A job was written (the change stream) or its member object's status changed (the gateway)."""
        with self._lock:
            key = self._jobs.get(job_id)
            if key is None:
                return
            self._dirty.setdefault(key, 0.0)
        self._wake.set()

    def workload_changed(self, cluster: str, job_id: str) -> None:
        """broker.core.ports.WorkloadWatch's callback: a member Job's status changed."""
        self.job_changed(job_id)

    # ------------------------------------------------------------------ one pass (the worker)

    def run_once(self) -> None:
        """Cancel the deleted objects' jobs, submit or write back the changed ones, and now and then
        compare the hub's jobs with the hub's objects."""
        with self._lock:
            deleted, self._deleted = self._deleted, []
            now = time.monotonic()
            due = [k for k, t in self._dirty.items() if t <= now]
            for k in due:
                del self._dirty[k]
        for gone_kind, gone in deleted:
            try:
                self._cancel_deleted(gone_kind, gone)
            except (StoreError, ClusterError) as exc:
                log.warning(
                    "hub: cancelling the job of a deleted %s failed (retried): %s", gone_kind.kind, exc
                )
                with self._lock:
                    self._deleted.append((gone_kind, gone))
        for key in due:
            found = hub.kind_of(key[0])
            obj = self.port.get(found, key[1], key[2]) if found is not None else None
            if found is None or obj is None:
                continue
            try:
                self.sync_object(found, obj)
                self._failures.pop(key, None)
            except GpufedError as exc:
                # a member or the hub that does not answer, the store, a name still taken: again later,
                # backing off (2 s doubling to a minute), said once per streak
                n = self._failures[key] = self._failures.get(key, 0) + 1
                if n == 1:
                    log.warning("hub: %s %s/%s: %s (retried)", found.kind, key[1], key[2], exc)
                with self._lock:
                    delay = min(_RETRY_MAX_SECONDS, _RETRY_SECONDS * 2 ** min(n - 1, 10))
                    self._dirty.setdefault(key, time.monotonic() + delay)
        if time.monotonic() >= self._next_reconcile:
            try:
                self.reconcile_deletes()
                self._next_reconcile = time.monotonic() + self.reconcile_seconds
            except StoreError as exc:
                log.warning("hub: the reconcile of deleted hub objects failed (retried): %s", exc)

    def sync_object(self, kind: hub.WatchedKind, obj: Obj) -> JobRecord | None:
        """Submit a managed hub object (once), then write its job's state back to it."""
        ref = hub.ref_of(obj, kind)
        if ref is None or not hub.is_managed(obj):
            return None
        job_id = hub.annotations_of(obj).get(hub.JOB_ANNOTATION)
        record = self.service.store.get_job(job_id) if job_id else None
        if job_id and record is not None and not _owns(record, ref):
            # the annotation is anyone's to write: another object's job is neither shown nor cancelled
            log.warning("hub: %s names job %s, which is not its own: ignored", ref.source, job_id)
            job_id, record = None, None
        if not job_id:
            generation = (obj.get("metadata") or {}).get("generation")
            if hub.is_finished(obj.get("status")) or self._refused.get(ref.uid, ...) == generation:
                return None  # it ended (or was refused) before: never submitted again
            record = self._submit(ref, obj)
            if record is None:
                return None
        if record is None:
            return None  # the job's record expired (finishedJobTtlSeconds): the hub object keeps its status
        with self._lock:
            self._jobs[record.id] = ref.key
            self._uids[ref.uid] = record.id
        self._write_back(ref, obj, record)
        return record

    def _submit(self, ref: hub.HubRef, obj: Obj) -> JobRecord | None:
        tenant = hub.tenant_of(ref.namespace, self.tenant_mapping)
        try:
            body = hub.submission_of(obj, ref.kind, tenant)
            request = replace(submission_request(body), tenant=tenant, source=ref.source)
            record, created = self.service.submit(request, idempotency_key=ref.uid)
        except RequestValidationError as exc:
            self._refuse(ref, obj, *first_problem(exc))
            return None
        except InvalidRequest as exc:
            if ref.kind == hub.BATCH_JOB:
                exc = k8s_job.as_job_error(exc)
            self._refuse(ref, obj, exc.field, exc.detail)
            return None
        if created:
            self.submitted += 1
            log.info("hub: %s is job %s (tenant %s)", ref.source, record.id, tenant)
            self._audit("submit", f"job/{record.id}", tenant, 201, ref.source, record.trace_parent)
        return record

    def _audit(
        self, verb: str, obj: str, tenant: str, code: int, reason: str, trace_parent: str | None = None
    ) -> None:
        """One record of the hub's acts in the audit trail: the subject is the hub object."""
        if self.audit is None:
            return
        self.audit(
            AuditRecord(
                at=self.service.clock.now(),
                subject="system:hub",
                tenant=tenant,
                role="system",
                verb=verb,
                object=obj,
                outcome="success" if code < 400 else "failure",
                code=code,
                reason=reason,
                trace_id=telemetry.trace_id_of(trace_parent) or "",
            )
        )

    def _refuse(self, ref: hub.HubRef, obj: Obj, field: str, message: str) -> None:
        self._refused[ref.uid] = (obj.get("metadata") or {}).get("generation")
        text = f"{field}: {message}"
        log.info("hub: %s refused: %s", ref.source, text)
        tenant = hub.tenant_of(ref.namespace, self.tenant_mapping)
        self._audit("submit", ref.source, tenant, 422, text)
        try:
            self.port.event(ref.kind, obj, "Warning", "Refused", text)
        except ClusterError as exc:
            log.warning("hub: cannot record the refusal of %s as an event: %s", ref.source, exc)
        status = hub.refused_status(ref.kind, obj.get("status"), field, message, now_rfc3339())
        self.port.write(ref.kind, ref.namespace, ref.name, {hub.STATE_ANNOTATION: "REFUSED"}, status)

    def _write_back(self, ref: hub.HubRef, obj: Obj, record: JobRecord) -> None:
        member: Mapping[str, Any] | None = None
        if record.cluster and record.workload_name and record.state is not JobState.QUEUED:
            traits = self.service.traits.get(record.cluster)
            namespace = traits.namespace_for(record.request.tenant) if traits is not None else "default"
            member = self.member_status(
                record.cluster, ref.kind.api_version, ref.kind.kind, namespace, record.workload_name
            )
        status = hub.hub_status(
            ref.kind, str(record.state), record.reason, member, obj.get("status"), now_rfc3339()
        )
        notes = hub.hub_annotations(record.id, str(record.state), record.cluster)
        have = hub.annotations_of(obj)
        if status is None and all(have.get(k) == v for k, v in notes.items()):
            return
        said = hub.queued_message(obj.get("status"))  # before the write (a port may update obj in place)
        written = self.port.write(ref.kind, ref.namespace, ref.name, notes, status)
        told = hub.queued_message(status)
        if written and told is not None and hub.reason_shape(told) != hub.reason_shape(said):
            try:  # once per new kind of reason (not per count moved), as `kubectl describe` lists them
                self.port.event(ref.kind, obj, "Normal", "Queued", told)
            except ClusterError as exc:
                log.warning("hub: cannot record why %s is queued as an event: %s", ref.source, exc)

    def _cancel_deleted(self, kind: hub.WatchedKind, obj: Obj) -> None:
        ref = hub.ref_of(obj, kind)
        if ref is None:
            return
        with self._lock:
            job_id = self._uids.pop(ref.uid, None) or hub.annotations_of(obj).get(hub.JOB_ANNOTATION)
            if job_id is not None:
                self._jobs.pop(job_id, None)
        if job_id is not None:  # else submitted by no one yet, or found by reconcile_deletes
            self._cancel(job_id, ref.source, ref)

    def _cancel(self, job_id: str, source: str, ref: hub.HubRef | None = None) -> bool:
        record = self.service.store.get_job(job_id)
        if record is None or record.state.terminal or (ref is not None and not _owns(record, ref)):
            return False
        try:
            self.service.cancel(job_id)
        except (Conflict, NotFound):
            return False  # it ended meanwhile
        log.info("hub: %s was deleted: job %s cancelled", source, job_id)
        self._audit(
            "cancel", f"job/{job_id}", record.request.tenant, 200, f"{source} deleted", record.trace_parent
        )
        return True

    def reconcile_deletes(self) -> list[str]:
        """Cancel the non-terminal hub jobs whose hub object is gone (kinds with a synced cache only)."""
        synced = {k.resource for k in hub.WATCHED_KINDS if self.port.synced(k)}
        if not synced:
            return []
        live = {ref.uid for kind, obj in self.port.objects() if (ref := hub.ref_of(obj, kind)) is not None}
        cancelled: list[str] = []
        for record in self.service.store.list_jobs(_ACTIVE):
            source = record.request.source
            if not source.startswith("hub:"):
                continue
            resource = source.removeprefix("hub:").split("/", 1)[0]
            uid = (record.idempotency_key or "").split("/", 1)[-1]
            if resource in synced and uid and uid not in live and self._cancel(record.id, source):
                cancelled.append(record.id)
        return cancelled

    # ------------------------------------------------------------------ threads

    def _work(self) -> None:
        while not self._stop.is_set():
            if not self.leader():
                self._was_leader = False
                self.idle_passes += 1
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            if not self._was_leader:  # taking over: every object again, and the missed deletes
                self._was_leader = True
                self._next_reconcile = 0.0
                with self._lock:
                    for kind, obj in self.port.objects():
                        ref = hub.ref_of(obj, kind)
                        if ref is not None:
                            self._dirty.setdefault(ref.key, 0.0)
            try:
                self.run_once()
            except Exception:  # the duty never dies; the next pass tries again
                log.exception("hub: pass failed")
            self._wake.wait(0.5)
            self._wake.clear()

    def _follow_changes(self) -> None:
        """The broker's change stream (P:changes), read like broker.controller.change_feed does: a job
        written by anyone (a transition, a cancel) marks its hub object."""
        store = self.service.store
        cursor: str | None = None
        while not self._stop.is_set():
            if not self.leader():
                cursor = None
                self._stop.wait(0.5)
                continue
            try:
                if cursor is None:
                    cursor = store.last_change_id()
                changes = store.read_changes(cursor, block_ms=1000, count=1000)
            except StoreError as exc:
                log.debug("hub: change stream: %s", exc)
                self._stop.wait(1.0)
                continue
            for entry, job_id, _ in changes:
                cursor = entry
                self.job_changed(job_id)

    def start(self) -> None:
        for target, name in ((self._work, "gpufed-hub-sync"), (self._follow_changes, "gpufed-hub-changes")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
