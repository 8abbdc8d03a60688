"""Use cases of the broker: submit, cancel, schedule_once, sync_status, explain, fleet.

Owns the order of steps and their idempotence, over the ports only (StateStore, ClusterGateway, Clock);
every decision is delegated to the pure core (placement, hints, lifecycle). Each step can be re-run
after a crash at any point without losing or duplicating a job:

- schedule_once: QUEUED -> reserve capacity (atomic) -> record PLACED with the workload name derived
  from job id + attempt -> create the Job in the member cluster (409 = already there). A failed create
  releases the reservation and puts the job back to QUEUED with the reason.
- cancel: compare-and-set to CANCELLED, then delete the Job; a dispatch that created the Job meanwhile
  sees CANCELLED after its create and deletes it, so a racing cancel never leaves a Job running.
- sync_status: for PLACED/ADMITTED/RUNNING jobs, read the Job in its cluster and apply
  lifecycle.observe; reservations are released once the pods are visible (RUNNING) or the job ended.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from broker import catalog, hints, lifecycle, placement, telemetry
from broker.errors import ClusterError, Conflict, InvalidRequest, NotFound, StoreError
from broker.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobEvent,
    JobRecord,
    JobRequest,
    JobState,
    NoFit,
    Placement,
    Reservation,
)
from broker.ports import Clock, ClusterGateway, StateStore

log = logging.getLogger(__name__)

# After the n-th refused or failed create, a job waits 2**n seconds (at most this) before the next try,
# so a cluster that keeps refusing a manifest is not hammered every pass.
DISPATCH_BACKOFF_MAX_SECONDS = 300.0


# How often cancel() re-reads a job that changed state under it before giving up.
_CANCEL_ATTEMPTS = 5


def new_job_id() -> str:
    return "j" + uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class ServiceSettings:
    reservation_ttl_seconds: float = 120.0
    priorities: Mapping[str, int] | None = None  # priority class name -> value


class BrokerService:
    def __init__(
        self,
        store: StateStore,
        gateway: ClusterGateway,
        clock: Clock,
        traits: Mapping[str, ClusterTraits],
        policy: placement.PlacementPolicy | None = None,
        settings: ServiceSettings | None = None,
        new_id: Callable[[], str] = new_job_id,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.clock = clock
        self.traits = dict(traits)
        self.policy = policy or placement.PlacementPolicy()
        self.settings = settings or ServiceSettings()
        self._new_id = new_id

    # ------------------------------------------------------------------ submit / read / cancel

    def submit(self, request: JobRequest, idempotency_key: str | None = None) -> tuple[JobRecord, bool]:
        """Accept a job into the global queue. Returns (record, created); a seen key returns the first job."""
        unknown = [c for c in request.clusters if c not in self.traits]
        if unknown:
            raise InvalidRequest("clusters", f"unknown cluster(s): {', '.join(unknown)}")
        request = self._canonical_products(request)
        now = self.clock.now()
        job_id = self._new_id()
        with telemetry.job_span("gpufed.job.submit", None, **{"gpufed.job_id": job_id}) as span:
            record = JobRecord(
                id=job_id,
                request=request,
                state=JobState.QUEUED,
                created_at=now,
                updated_at=now,
                reason="waiting for placement",
                idempotency_key=idempotency_key,
                trace_parent=telemetry.traceparent_of(span),
            )
            stored = self.store.create_job(record)
            created = stored.id == record.id
            if created:
                self._event(stored, "submitted")
        return stored, created

    def _canonical_products(self, request: JobRequest) -> JobRequest:
        """Catalog names in their canonical spelling; a product neither in the catalog nor seen in any
        cluster (unknown products keep their raw GFD name) is refused, as is a MIG profile no product has."""
        seen = {p.product for s in self.store.observed_summaries() for p in s.products}
        products: list[str] = []
        for i, name in enumerate(request.gpu_products):
            known = catalog.entry(name)
            if known is not None:
                products.append(known.name)
            elif name in seen:
                products.append(name)
            else:
                choices = ", ".join(sorted(set(catalog.names()) | seen))
                raise InvalidRequest(f"gpuProducts[{i}]", f"unknown GPU product {name!r}; known: {choices}")
        profile = request.mig_profile
        if profile is not None and not any(catalog.mig_profile(n, profile) for n in catalog.names()):
            raise InvalidRequest("mig.profile", f"no GPU product has the MIG profile {profile!r}")
        return replace(request, gpu_products=tuple(products))

    def get(self, job_id: str) -> JobRecord:
        record = self.store.get_job(job_id)
        if record is None:
            raise NotFound(f"job {job_id} not found")
        return record

    def jobs(self, states: list[JobState] | None = None) -> list[JobRecord]:
        return sorted(self.store.list_jobs(states), key=lambda r: (r.created_at, r.id))

    def events(self, job_id: str) -> list[JobEvent]:
        self.get(job_id)
        return self.store.job_events(job_id)

    def cancel(self, job_id: str) -> JobRecord:
        """CANCELLED first (compare-and-set on the state read), then the Job is deleted from its cluster.

        In that order a dispatch racing with the cancel either loses its own compare-and-set or sees
        CANCELLED after its create and deletes what it created (see _dispatch); a job that finished
        meanwhile stays finished."""
        record = self.get(job_id)
        for _ in range(_CANCEL_ATTEMPTS):
            if record.state.terminal:
                raise Conflict(f"job {job_id} is already {record.state}")
            try:
                cancelled = self._transition(record, JobState.CANCELLED, "cancelled by user", record.state)
                break
            except Conflict:
                record = self.get(job_id)  # it moved on meanwhile: judge the state it is in now
        else:
            raise Conflict(f"job {job_id} kept changing state; cancel again")
        self.store.release(job_id)
        if record.cluster and record.workload_name and record.state is not JobState.QUEUED:
            self._delete_workload(record.cluster, record.workload_name, cancelled)
        return cancelled

    def _delete_workload(self, cluster: str, name: str, record: JobRecord) -> None:
        """Remove a Job the broker no longer wants; a failure is logged and recorded, never raised."""
        namespace = self.traits[cluster].namespace if cluster in self.traits else "default"
        try:
            self.gateway.delete_workload(cluster, namespace, name)
        except ClusterError as exc:
            log.warning("cannot delete %s on %s for %s: %s", name, cluster, record.id, exc)
            self._event(record, f"Job {name} could not be deleted from {cluster}: {exc}")

    # ------------------------------------------------------------------ capacity

    def fleet(self) -> list[ClusterSummary]:
        return sorted(self.store.observed_summaries(), key=lambda s: s.cluster)

    def explain(self, request: JobRequest) -> tuple[Placement | NoFit, list[placement.ClusterVerdict]]:
        """Dry run: where the job would go now, and every cluster's verdict. Changes nothing."""
        summaries = self._placeable()
        now = self.clock.now()
        decision = placement.place(request, summaries, self.traits, self.policy, now)
        return decision, placement.explain(request, summaries, self.traits, self.policy, now)

    # ------------------------------------------------------------------ the control loop's steps

    def schedule_once(self) -> list[JobRecord]:
        """Try to place every QUEUED job once, highest priority first. Returns the jobs that changed."""
        queued = lifecycle.queue_order(
            self.store.list_jobs([JobState.QUEUED]), dict(self.settings.priorities or {})
        )
        if not queued:
            return []
        changed: list[JobRecord] = []
        summaries = self._placeable()
        for s in summaries:
            if s.heartbeat:
                telemetry.capacity_freshness.labels(s.cluster).observe(
                    max(0.0, self.clock.now() - s.heartbeat)
                )
        for record in queued:
            now = self.clock.now()
            if now < record.not_before:
                continue  # backing off after a failed dispatch
            try:
                with telemetry.job_context(record.trace_parent):  # its log lines carry its trace id
                    step = self._schedule_job(record, summaries, now)
            except StoreError:
                raise  # the store is down: nothing else can progress either
            except Exception:
                log.exception(
                    "placing %s failed; the other jobs go on and it is retried next pass", record.id
                )
                continue
            if step is not None:
                changed.append(step)
                if step.state is JobState.PLACED:
                    summaries = self._placeable()
        return changed

    def _schedule_job(
        self, record: JobRecord, summaries: list[ClusterSummary], now: float
    ) -> JobRecord | None:
        """One placement attempt: the job as changed (PLACED, or QUEUED with a new reason), or None."""
        recorder = telemetry.PhaseRecorder()
        started = time.perf_counter()
        decision = placement.place(record.request, summaries, self.traits, self.policy, now, recorder)
        outcome = "unplaceable" if isinstance(decision, NoFit) else "placed"
        telemetry.placement_latency.labels(outcome).observe(time.perf_counter() - started)
        if isinstance(decision, NoFit):
            if record.reason != decision.message:
                if not record.reason.startswith("0/"):  # it just became unplaceable, not a retry
                    telemetry.unplaceable.inc()
                recorder.emit(record.trace_parent, outcome, **{"gpufed.reason": decision.message})
                return self._save(replace(record, reason=decision.message, updated_at=now))
            return None
        recorder.emit(record.trace_parent, outcome, **{"gpufed.cluster": decision.cluster})
        placed = self._dispatch(record, decision, now)
        if placed is not None and placed.state is JobState.PLACED:
            telemetry.placements.labels(decision.cluster, decision.product).inc()
            if record.attempt == 0:
                telemetry.queue_wait.observe(max(0.0, now - record.created_at))
        return placed

    def _dispatch(self, record: JobRecord, where: Placement, now: float) -> JobRecord | None:
        attempt = record.attempt + 1
        reservation = Reservation(
            job_id=record.id,
            attempt=attempt,
            cluster=where.cluster,
            product=where.product,
            resource_name=where.resource_name,
            units=where.total_units,
            created_at=now,
            expires_at=now + self.settings.reservation_ttl_seconds,
        )
        with telemetry.job_span(
            "gpufed.job.reserve", record.trace_parent, **{"gpufed.cluster": where.cluster}
        ) as span:
            reserved = self.store.reserve(reservation, now)
            span.set_attribute("gpufed.reserved", reserved)
        if not reserved:
            return None  # lost a race for the capacity; the next cycle sees fresh numbers
        traits = self.traits[where.cluster]
        manifests = hints.build_workload(record.id, attempt, record.request, where, traits)
        name = hints.workload_name(record.id, attempt)
        reason = f"placed on {where.cluster}: {where.units_per_pod}x {where.resource_name} per pod ({where.product}), score {where.score}"
        try:
            placed = self._transition(
                replace(record, attempt=attempt, cluster=where.cluster, placement=where, workload_name=name),
                JobState.PLACED,
                reason,
                expected=JobState.QUEUED,
            )
        except Conflict:
            self.store.release(record.id)
            return None  # cancelled meanwhile, or another replica took it
        try:
            with (
                telemetry.job_span(
                    "gpufed.job.dispatch", record.trace_parent, **{"gpufed.cluster": where.cluster}
                ),
                telemetry.dispatch_latency.labels(where.cluster).time(),
            ):
                self.gateway.create_workload(where.cluster, manifests.job, manifests.companions)
        except ClusterError as exc:
            log.warning("dispatch of %s to %s failed: %s", record.id, where.cluster, exc)
            telemetry.dispatch_failures.labels(where.cluster).inc()
            self.store.release(record.id)
            failures = placed.dispatch_failures + 1
            backoff = min(DISPATCH_BACKOFF_MAX_SECONDS, 2.0**failures)
            return self._transition(
                replace(
                    placed,
                    cluster=None,
                    placement=None,
                    workload_name=None,
                    dispatch_failures=failures,
                    not_before=self.clock.now() + backoff,
                ),
                JobState.QUEUED,
                f"dispatch-failed (attempt {attempt}, next try in {backoff:.0f} s): {exc}",
                expected=JobState.PLACED,
            )
        current = self.store.get_job(record.id)
        if current is None or current.state is JobState.CANCELLED or current.workload_name != name:
            # Cancelled while the Job was being created: cancel() may have deleted before our create.
            self.store.release(record.id)
            self._delete_workload(where.cluster, name, current or placed)
            return None
        return placed

    def sync_status(self) -> list[JobRecord]:
        """Follow every placed job in its member cluster. Returns the jobs that changed state."""
        changed: list[JobRecord] = []
        down = self._unavailable_clusters()
        for record in self.store.list_jobs([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING]):
            if record.cluster in down:
                continue  # its pollers say it does not answer: don't stall the loop on its timeouts
            try:
                with telemetry.job_context(record.trace_parent):
                    step = self._sync_job(record)
            except StoreError:
                raise
            except Exception:
                log.exception(
                    "following %s failed; the other jobs go on and it is retried next pass", record.id
                )
                continue
            if step is not None:
                changed.append(step)
        return changed

    def _sync_job(self, record: JobRecord) -> JobRecord | None:
        if not record.cluster or not record.workload_name:
            return None
        namespace = self.traits[record.cluster].namespace if record.cluster in self.traits else "default"
        try:
            status = self.gateway.read_workload(record.cluster, namespace, record.workload_name)
        except ClusterError as exc:
            log.info("cannot read %s on %s: %s", record.workload_name, record.cluster, exc)
            return None
        step = lifecycle.observe(record, status, self.clock.now())
        if step is None:
            return None
        if step.state in (JobState.RUNNING, JobState.QUEUED) or step.state.terminal:
            self.store.release(record.id)
        target = record
        if step.state is JobState.QUEUED:
            target = replace(record, cluster=None, placement=None, workload_name=None)
        try:
            return self._transition(target, step.state, step.reason, expected=record.state)
        except Conflict:
            return None  # cancelled meanwhile

    def sweep_orphans(self) -> list[str]:
        """Delete the broker's Jobs that no current attempt owns (see lifecycle.orphan_reason), in every
        declared cluster that answers. Returns "cluster/name" of each Job deleted."""
        deleted: list[str] = []
        down = self._unavailable_clusters()
        for cluster, traits in sorted(self.traits.items()):
            if cluster in down:
                continue
            try:
                refs = self.gateway.list_workloads(cluster, traits.namespace)  # before the records
            except ClusterError as exc:
                log.info("cannot list Jobs on %s for the sweep: %s", cluster, exc)
                continue
            for ref in refs:
                record = self.store.get_job(ref.job_id)
                reason = lifecycle.orphan_reason(ref, record)
                if reason is None or record is None:
                    continue
                try:
                    self.gateway.delete_workload(cluster, ref.namespace, ref.name)
                except ClusterError as exc:
                    log.warning("cannot delete left-over Job %s on %s: %s", ref.name, cluster, exc)
                    continue
                log.info("deleted left-over Job %s on %s: %s", ref.name, cluster, reason)
                self.store.append_event(
                    JobEvent(
                        job_id=record.id,
                        at=self.clock.now(),
                        state=record.state,
                        attempt=record.attempt,
                        reason=f"deleted left-over Job {ref.name} on {cluster}: {reason}",
                        cluster=cluster,
                        trace_id=telemetry.trace_id_of(record.trace_parent),
                    )
                )
                deleted.append(f"{cluster}/{ref.name}")
        return deleted

    # ------------------------------------------------------------------ helpers

    def _unavailable_clusters(self) -> set[str]:
        """Clusters whose pollers report them unreachable or forbidden: calls to them would only time out."""
        return {
            s.cluster
            for s in self.store.observed_summaries()
            if s.health in (Health.UNREACHABLE, Health.FORBIDDEN)
        }

    def _placeable(self) -> list[ClusterSummary]:
        """Placeable summaries of the declared clusters only: Redis may still hold the summary of a
        cluster removed from the configuration (or one another broker on the same prefix watches)."""
        return [s for s in self.store.placeable_summaries() if s.cluster in self.traits]

    def _transition(
        self, record: JobRecord, state: JobState, reason: str, expected: JobState | None = None
    ) -> JobRecord:
        now = self.clock.now()
        with telemetry.job_span(
            "gpufed.job.state", record.trace_parent, **{"gpufed.state": str(state), "gpufed.reason": reason}
        ):
            saved = self.store.save_job(replace(record, state=state, reason=reason, updated_at=now), expected)
            telemetry.transitions.labels(str(state)).inc()
            self._event(saved, reason)
        return saved

    def _save(self, record: JobRecord) -> JobRecord:
        return self.store.save_job(record, record.state)

    def _event(self, record: JobRecord, reason: str) -> None:
        self.store.append_event(
            JobEvent(
                job_id=record.id,
                at=record.updated_at,
                state=record.state,
                attempt=record.attempt,
                reason=reason,
                cluster=record.cluster,
                trace_id=telemetry.trace_id_of(record.trace_parent),
            )
        )
