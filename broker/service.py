"""Use cases of the broker: submit, cancel, schedule_once, sync_status, explain, fleet.

Owns the order of steps and their idempotence, over the ports only (StateStore, ClusterGateway, Clock);
every decision is delegated to the pure core (placement, hints, lifecycle). Each step can be re-run
after a crash at any point without losing or duplicating a job:

- schedule_once: one pass of Kueue's cycle. The FleetCache is refreshed incrementally (only clusters
  whose summary version or reservation ledger moved are read), the QUEUED jobs are taken in queue order
  (broker.queueing: priority, fair share across tenants, age; a job a quota holds back keeps the rule
  as its reason and is not placed) and placed one after another by a BatchPlacer over the cache's
  placeable view; each placement is
  reserved by compare-and-set at exactly the state it was decided on (a cluster that moved is read again
  and the job decided again), assumed into the cache and the placer, recorded PLACED with the workload
  name derived from job id + attempt, and handed to the Dispatcher, which creates the Job in the member
  cluster (409 = already there) concurrently across clusters. A failed create releases the reservation
  and puts the job back to QUEUED with the reason and a backoff. A job that can never fit the fleet
  (every cluster rejects it for a reason freed capacity can't change) is parked until the fleet's
  structure changes; one that can't fit now is not looked at again until the cache changes.
- cancel: compare-and-set to CANCELLED, then delete the Job; a dispatch that created the Job meanwhile
  sees CANCELLED after its create and deletes it, so a racing cancel never leaves a Job running.
- sync_status: for PLACED/ADMITTED/RUNNING jobs, read the Job in its cluster and apply
  lifecycle.observe; reservations are released once the pods are visible (RUNNING) or the job ended.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from broker import (
    catalog,
    failover,
    faults,
    hints,
    lifecycle,
    member_quota,
    placement,
    preemption,
    queueing,
    telemetry,
)
from broker.batch_placement import BatchPlacer
from broker.burst_gate import BurstGate
from broker.dispatch import Dispatcher, InlineDispatcher
from broker.errors import (
    ClusterError,
    ClusterRejected,
    Conflict,
    Fenced,
    InvalidRequest,
    NotFound,
    StoreError,
)
from broker.failover import ClusterHealth
from broker.fleet_cache import FleetCache
from broker.model import (
    ClusterEvent,
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
from broker.ports import Clock, ClusterGateway, ReserveResult, StateStore
from broker.spend import TenantSpend
from broker.vocabulary import GPU
from broker.wait_prediction import Prediction
from broker.workload import annotation_budget, finished_ttl

log = logging.getLogger(__name__)

# After the n-th refused or failed create, a job waits 2**n seconds (at most this) before the next try,
# so a cluster that keeps refusing a manifest is not hammered every pass.
DISPATCH_BACKOFF_MAX_SECONDS = 300.0


# How often cancel() re-reads a job that changed state under it before giving up.
_CANCEL_ATTEMPTS = 5
# How often one job is decided again in a pass when its cluster changed between decision and reserve.
_RESERVE_ATTEMPTS = 3
# A job that could not fit is looked at again when the cache changed, or after this long regardless
# (reservations expire without any write).
_NOFIT_RECHECK_SECONDS = 5.0
# A preemptor does not preempt again this soon: its victims' pods are on their way out.
_PREEMPT_SETTLE_SECONDS = 30.0
# The queue view (positions and why) is computed again at most this often.
_QUEUE_VIEW_TTL_SECONDS = 1.0
# The product names the fleet shows, for submit's validation: read again at most this often.
_KNOWN_PRODUCTS_TTL_SECONDS = 5.0


def new_job_id() -> str:
    return "j" + uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class ServiceSettings:
    reservation_ttl_seconds: float = 120.0
    priorities: Mapping[str, int] | None = None  # priority class name -> value
    cluster_lost_seconds: float = 10.0  # unreachable this long (or credentials rejected this long): lost
    federation: str | None = None  # the store prefix, written on every Job (broker.recovery adopts by it)
    queue: queueing.QueuePolicy | None = None  # priorities, fair-share weights, quotas (docs/tenancy.md)
    # who may preempt lower priorities, and the storm limits (broker.preemption); None: nobody preempts
    preemption: preemption.PreemptionPolicy | None = None
    # a finished Job is deleted from its member this long after it ended (ttlSecondsAfterFinished)
    finished_job_ttl_seconds: int | None = 3600

    def queue_policy(self) -> queueing.QueuePolicy:
        """The global queue's policy (`queue`, else just `priorities`)."""
        if self.queue is not None:
            return self.queue
        return queueing.QueuePolicy(priorities=dict(self.priorities or {}))


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
        dispatcher: Dispatcher | None = None,
        placer_id: str | None = None,
        burst: BurstGate | None = None,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.clock = clock
        self.traits = dict(traits)
        self.policy = policy or placement.PlacementPolicy()
        self.settings = settings or ServiceSettings()
        self._new_id = new_id
        self.dispatcher: Dispatcher = dispatcher or InlineDispatcher()
        # Owns the reservations this service makes: no other placer's reserve or release touches them.
        self.placer_id = placer_id or "p" + uuid.uuid4().hex[:12]
        # A cloud pool's scale-up headroom counts as capacity (docs/burst.md) when a burst gate knows it.
        self.cache = FleetCache(store, self.traits, grow=burst.grow if burst is not None else None)
        self._pending_traits: dict[str, ClusterTraits] | None = None  # set_traits(), applied by a pass
        self._pending_lock = threading.Lock()
        self._parked: dict[str, str] = {}  # job id -> the offered fleet it can never fit (_offered_fleet)
        self._no_fit: dict[str, tuple[int, float]] = {}  # job id -> (cache generation, time) of its NoFit
        self._known_products: frozenset[str] = frozenset()
        self._known_products_at = float("-inf")
        self.evaluations = 0  # jobs decided by the scheduling passes (what parking saves)
        self._health_seen: dict[str, Health] = {}
        self._blind = False  # every poller silent at the last observe_clusters (said once per spell)
        self._fenced: set[str] = set()  # clusters not offered to placement until swept (observe_clusters)
        self._next_loss_at: float | None = None  # the earliest loss deadline of a failing cluster
        # (job id, attempt) -> (cluster, its summary version when the job's pods were seen ready): the
        # reservation is released once a newer summary (which counts those pods) is in the store. Written
        # by the per-cluster sync workers, read by the loop: under its lock.
        self._settling: dict[tuple[str, int], tuple[str, int]] = {}
        self._settling_lock = threading.Lock()
        self._slots: tuple[float, dict[str, queueing.Slot]] | None = None  # (when, the queue view)
        # Wait-or-burst and spend (docs/burst.md); None: a job that allows burst bursts when nothing fits.
        self.burst = burst
        self._predicted: tuple[dict[str, queueing.Slot], dict[str, Prediction]] | None = None
        # job id -> (cluster, tenant namespace, quota usage) of placements not yet counted by the cluster
        self._quota_charges: dict[str, tuple[str, str, Mapping[str, int]]] = {}
        self._preempted_for: dict[str, float] = {}  # preemptor job id -> when its victims were evicted
        self._preemptions: list[tuple[float, str, int]] = []  # (when, tenant, victims): the storm limits
        self._unreadable: set[str] = set()  # clusters whose last Job read failed (said once, until one works)
        self._tenants_seen: set[str] = set()  # tenants of jobs seen queued or placed (the sweep's namespaces)

    # ------------------------------------------------------------------ submit / read / cancel

    def submit(self, request: JobRequest, idempotency_key: str | None = None) -> tuple[JobRecord, bool]:
        """Accept a job into the global queue. Returns (record, created); a seen key returns the first job."""
        record, event = self.prepare_submit(request, idempotency_key)
        return self.accepted(record, self.store.create_job(record, event))

    def submit_many(
        self, prepared: Sequence[tuple[JobRecord, JobEvent]]
    ) -> list[tuple[JobRecord, bool] | StoreError | Conflict]:
        """Store many prepared submits in one round trip (the API's group commit). Per submit, in order:
        (record, created) as submit returns it, or the error it met (the others are stored anyway)."""
        out: list[tuple[JobRecord, bool] | StoreError | Conflict] = []
        for (record, _), stored in zip(prepared, self.store.create_jobs(prepared), strict=True):
            out.append(stored if isinstance(stored, Exception) else self.accepted(record, stored))
        return out

    def accepted(self, record: JobRecord, stored: JobRecord) -> tuple[JobRecord, bool]:
        """(the stored job, whether it is new): a seen idempotency key stored nothing and names the first."""
        faults.point("submitted")
        return stored, stored.id == record.id

    def prepare_submit(
        self, request: JobRequest, idempotency_key: str | None = None
    ) -> tuple[JobRecord, JobEvent]:
        """Check a submit and make its record and first event (no write): InvalidRequest names the field."""
        unknown = [c for c in request.clusters if c not in self.traits]
        if unknown:
            raise InvalidRequest("clusters", f"unknown cluster(s): {', '.join(unknown)}")
        request = self._canonical_products(request)
        annotation_budget.check(request)  # 413 now, not a Job no API server would take
        known = self.settings.queue_policy().priorities
        if request.priority_class is not None and known and request.priority_class not in known:
            raise InvalidRequest(
                "priorityClass",
                f"unknown priority class {request.priority_class!r}; known: {', '.join(sorted(known))}",
            )
        if idempotency_key is not None:  # scoped per tenant: another tenant's key is another job
            idempotency_key = f"{request.tenant}/{idempotency_key}"
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
        return record, self._event_of(record, "submitted")

    def _canonical_products(self, request: JobRequest) -> JobRequest:
        """Catalog names in their canonical spelling; a product neither in the catalog nor seen in any
        cluster (unknown products keep their raw GFD name) is refused, as is a MIG profile no product has."""
        products: list[str] = []
        for i, name in enumerate(request.gpu_products):
            known = catalog.entry(name)
            if known is not None:
                products.append(known.name)
            elif name in self._fleet_products(refresh_if_missing=name):
                products.append(name)
            else:
                choices = ", ".join(sorted(set(catalog.names()) | self._known_products))
                raise InvalidRequest(f"gpuProducts[{i}]", f"unknown GPU product {name!r}; known: {choices}")
        profile = request.mig_profile
        if profile is not None and not any(catalog.mig_profile(n, profile) for n in catalog.names()):
            raise InvalidRequest("mig.profile", f"no GPU product has the MIG profile {profile!r}")
        return replace(request, gpu_products=tuple(products))

    def _fleet_products(self, refresh_if_missing: str | None = None) -> frozenset[str]:
        """Product names the fleet shows (unknown products keep their raw GFD name), cached for a few
        seconds: a submit never reads every summary. A name not in the cache triggers one early read."""
        now = self.clock.now()
        age = now - self._known_products_at
        missing = refresh_if_missing is not None and refresh_if_missing not in self._known_products
        if age > _KNOWN_PRODUCTS_TTL_SECONDS or (missing and age > 0.5):
            self._known_products = frozenset(
                p.product for s in self.store.observed_summaries() for p in s.products
            )
            self._known_products_at = now
        return self._known_products

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
                faults.point("cancelled")
                break
            except Conflict:
                record = self.get(job_id)  # it moved on meanwhile: judge the state it is in now
        else:
            raise Conflict(f"job {job_id} kept changing state; cancel again")
        self.store.release(job_id)
        if record.cluster and record.workload_name and record.state is not JobState.QUEUED:
            if self.burst is not None:
                self.burst.job_ended(record, JobState.CANCELLED, cancelled.updated_at, self.traits)
            self._delete_workload(record.cluster, record.workload_name, cancelled)
        return cancelled

    def _delete_workload(self, cluster: str, name: str, record: JobRecord) -> None:
        """Remove a Job the broker no longer wants; a failure is logged and recorded, never raised."""
        namespace = self._namespace(cluster, record.request.tenant)
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
        now = self.clock.now()
        summaries = [s for s in self.store.placeable_summaries(now) if s.cluster in self.traits]
        return placement.explain_and_decide(request, summaries, self.traits, self.policy, now)

    def explain_queue(self, request: JobRequest) -> queueing.Slot:
        """Dry run of the queue: where the job would stand if submitted now, and whether a quota would
        hold it back. Changes nothing."""
        now = self.clock.now()
        # "~" sorts after every job id: the probe stands behind the jobs submitted at the same instant
        probe = JobRecord(id="~explain", request=request, created_at=now, updated_at=now)
        queued = [r for r in self.store.list_jobs([JobState.QUEUED]) if r.state is JobState.QUEUED]
        offered = [s for s in self.store.placeable_summaries(now) if s.cluster in self.traits]
        return next(s for s in self._queue_plan([*queued, probe], offered) if s.record is probe)

    def explain_wait(self, request: JobRequest) -> Prediction | None:
        """Dry run of the wait prediction: when the job would start on-prem if submitted now, where and
        why (docs/burst.md); None without a burst gate or for a job the prediction does not model."""
        if self.burst is None:
            return None
        now = self.clock.now()
        probe = JobRecord(id="~explain", request=request, created_at=now, updated_at=now)
        queued = [r for r in self.store.list_jobs([JobState.QUEUED]) if r.state is JobState.QUEUED]
        offered = [s for s in self.store.placeable_summaries(now) if s.cluster in self.traits]
        order = [s.record for s in self._queue_plan([*queued, probe], offered)]
        return self.burst.predict(now, order, self._placed_jobs(), offered).get(probe.id)

    def spend(self) -> dict[str, TenantSpend]:
        """Each tenant's cloud spend this period (docs/burst.md); empty without a burst gate."""
        if self.burst is None:
            return {}
        return self.burst.spend_now(self.clock.now(), self._placed_jobs(), self.traits)

    def queue_predictions(self, including: Iterable[str] = ()) -> dict[str, Prediction]:
        """Every queued job's predicted on-prem start (for the job view), by job id; at most once a second."""
        if self.burst is None:
            return {}
        slots = self.queue_slots(including)
        if self._predicted is not None and self._predicted[0] is slots:
            return self._predicted[1]
        now = self.clock.now()
        order = [s.record for s in sorted(slots.values(), key=lambda s: s.position)]
        offered = [s for s in self.store.placeable_summaries(now) if s.cluster in self.traits]
        predicted = self.burst.predict(now, order, self._placed_jobs(), offered)
        self._predicted = (slots, predicted)
        return predicted

    # ------------------------------------------------------------------ the control loop's steps

    def set_traits(self, traits: Mapping[str, ClusterTraits], at_once: bool = False) -> None:
        """The member clusters changed while running (ClusterProfiles join and leave): the next
        scheduling pass places on exactly these. Safe from another thread: the pass applies it.
        at_once: apply now (a service that runs no pass: the API's beside the leader's)."""
        with self._pending_lock:
            self._pending_traits = dict(traits)
        if at_once:
            self._apply_pending_traits()

    def _apply_pending_traits(self) -> None:
        with self._pending_lock:
            pending, self._pending_traits = self._pending_traits, None
        if pending is not None:
            if pending != self.traits:  # verdicts read traits too (namespaces, Kueue): decide afresh
                self._parked.clear()
                self._no_fit.clear()
            self.traits = pending
            self.cache.set_clusters(pending)

    def schedule_once(self) -> list[JobRecord]:
        """One scheduling pass over every QUEUED job, in queue order. Returns the jobs that changed."""
        self._apply_pending_traits()
        # list_jobs reads the index, then each record: a record may have moved on in between (another
        # placer placed it), and deciding it again would re-reserve it at a newer attempt.
        queued = [r for r in self.store.list_jobs([JobState.QUEUED]) if r.state is JobState.QUEUED]
        self._tenants_seen.update(r.request.tenant for r in queued)
        waiting = {r.id for r in queued}
        self._parked = {j: fp for j, fp in self._parked.items() if j in waiting}
        self._no_fit = {j: g for j, g in self._no_fit.items() if j in waiting}
        if not queued:
            return []
        now = self.clock.now()
        self.cache.refresh()
        fleet = self._offered_fleet()
        offered = [self._charged(s) for s in self.cache.placeable_all(now) if s.cluster not in self._fenced]
        for s in offered:
            if s.heartbeat:
                telemetry.capacity_freshness.labels(s.cluster).observe(max(0.0, now - s.heartbeat))
        placer = BatchPlacer(offered, self.traits, self.policy, now)
        changed: list[JobRecord] = []
        slots = self._queue_plan(queued, offered)  # priority, fair share, age; quotas (queueing)
        if self.burst is not None:
            self.burst.begin_pass(now, [s.record for s in slots], self._placed_jobs, offered)
        for slot in slots:
            record = slot.record
            if slot.blocked is not None:
                changed.extend(self._hold(record, slot.blocked, now))
                continue
            if now < record.not_before:
                continue  # backing off after a failed dispatch
            if self._parked.get(record.id) == fleet:
                continue  # can never fit this fleet: wait for the fleet to change
            seen = self._no_fit.get(record.id)
            if (
                seen is not None
                and seen[0] == self.cache.generation
                and now - seen[1] < _NOFIT_RECHECK_SECONDS
            ):
                continue  # nothing changed since it did not fit
            try:
                with telemetry.job_context(record.trace_parent):  # its log lines carry its trace id
                    step = self._schedule_job(record, placer, now, slot.products)
            except (StoreError, Fenced):
                raise  # the store is down, or this replica is no longer the leader: nothing can progress
            except Exception:
                log.exception(
                    "placing %s failed; the other jobs go on and it is retried next pass", record.id
                )
                continue
            if step is not None:
                changed.append(step)
        return changed

    def _queue_plan(self, queued: list[JobRecord], offered: list[ClusterSummary]) -> list[queueing.Slot]:
        """The queue's order and quota verdicts for this pass, over the jobs holding GPUs now."""
        policy = self.settings.queue_policy()
        tenants = {r.request.tenant for r in queued}
        # What tenants hold matters only to share between several, or to quotas: one tenant without
        # quotas is ordered by priority and age, and the placed jobs need not be read.
        needs_usage = len(tenants) > 1 or any(policy.has_quotas(t) for t in tenants)
        active = (
            self.store.list_jobs([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING])
            if needs_usage
            else []
        )
        capacity, free = queueing.fleet_capacity(offered)
        return queueing.plan(queued, active, policy, capacity, free)

    def queue_slots(self, including: Iterable[str] = ()) -> dict[str, queueing.Slot]:
        """Every queued job's place in the queue (for the job view), by job id; computed at most once a
        second however many readers poll (the dashboard, `gpufed get`), unless a job in `including`
        is not in the last view (submitted since)."""
        now = self.clock.now()
        if (
            self._slots is not None
            and 0 <= now - self._slots[0] < _QUEUE_VIEW_TTL_SECONDS
            and all(i in self._slots[1] for i in including)
        ):
            return self._slots[1]
        queued = [r for r in self.store.list_jobs([JobState.QUEUED]) if r.state is JobState.QUEUED]
        offered = [s for s in self.store.placeable_summaries(now) if s.cluster in self.traits]
        slots = {slot.record.id: slot for slot in self._queue_plan(queued, offered)}
        self._slots = (now, slots)
        return slots

    def _hold(self, record: JobRecord, why: str, now: float) -> list[JobRecord]:
        """A job the queue holds back (a quota): its reason says which rule, saved when it changed."""
        if record.reason == why:
            return []
        try:
            return [self._save(replace(record, reason=why, updated_at=now))]
        except Conflict:
            return []  # another placer moved it meanwhile

    def _schedule_job(
        self, record: JobRecord, placer: BatchPlacer, now: float, products: tuple[str, ...] | None = None
    ) -> JobRecord | None:
        """One placement attempt: the job as changed (PLACED, or QUEUED with a new reason), or None.
        `products`, when given, narrows the products it may use in this pass (the queue's quotas)."""
        self.evaluations += 1
        request = record.request if products is None else replace(record.request, gpu_products=products)
        for _ in range(_RESERVE_ATTEMPTS):
            recorder = telemetry.PhaseRecorder()
            started = time.perf_counter()
            decision = placer.place(request)
            outcome = "unplaceable" if isinstance(decision, NoFit) else "placed"
            telemetry.placement_latency.labels(outcome).observe(time.perf_counter() - started)
            recorder.record_verdicts(placer.verdicts(request))
            if isinstance(decision, NoFit):
                return self._not_placed(record, decision, now, recorder)
            if decision.burst and self.burst is not None:
                gated = self._wait_or_burst(record, request, decision, placer, now)
                if not isinstance(gated, Placement):
                    return gated  # it waits for on-prem (its reason says why)
                decision = gated
            reservation, result = self._reserve(record, decision, now)
            if result.ok:
                faults.point("reserved")
                recorder.emit(record.trace_parent, outcome, **{"gpufed.cluster": decision.cluster})
                self.cache.assume(reservation, result.ledger)
                self._charge_quota(record, decision)
                self._assume_into(placer, decision.cluster, now)
                placed = self._commit(record, decision, now)
                if placed is not None:
                    telemetry.placements.labels(decision.cluster, decision.product).inc()
                    if record.attempt == 0:
                        telemetry.queue_wait.observe(max(0.0, now - record.created_at))
                return placed
            if result.status != ReserveResult.STALE:
                return None  # another placer holds this job, or the cluster is gone
            self.cache.refresh_cluster(decision.cluster)  # it moved since it was read: decide again
            self._assume_into(placer, decision.cluster, now)
        return None

    def enforce_budgets(self) -> list[JobRecord]:
        """Hard budgets (docs/burst.md): the cloud jobs of a tenant whose hard budget is spent are stopped.
        Each is paid for up to now, goes back to the queue by its failover policy (where it waits: no
        burst over budget) and its Job is deleted. Returns the jobs moved."""
        if self.burst is None or not self.burst.has_hard_budgets:
            return []
        now = self.clock.now()
        active = self._placed_jobs()
        by_id = {r.id: r for r in active}
        moved: list[JobRecord] = []
        for stop in self.burst.budget_stops(now, active, self.traits):
            for job_id in stop.job_ids:
                record = by_id[job_id]
                name, cluster = record.workload_name, record.cluster
                step = self._fail_over(record, stop.reason, at=now)  # its run so far is paid for
                if step is None:
                    continue  # it moved on meanwhile (finished, cancelled)
                moved.append(step)
                telemetry.budget_stops.labels(stop.tenant).inc()
                if name and cluster:
                    self.dispatcher.submit(
                        cluster, functools.partial(self._delete_workload, cluster, name, record)
                    )
            log.warning(
                "hard budget of tenant %s spent ($%.2f of $%.2f this %s): %d cloud job(s) stopped",
                stop.tenant,
                stop.spent,
                stop.budget.amount,
                stop.budget.period,
                len(stop.job_ids),
            )
        return moved

    def _placed_jobs(self) -> list[JobRecord]:
        return self.store.list_jobs([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING])

    def _wait_or_burst(
        self, record: JobRecord, request: JobRequest, decision: Placement, placer: BatchPlacer, now: float
    ) -> Placement | JobRecord | None:
        """Nothing on-prem fits now and placement chose a cloud cluster: the burst gate decides whether
        the job goes there (the Placement, on the cloud cluster it chose) or waits for on-prem (the job
        as saved with the decision as its reason, or None). A change of verdict is one event."""
        assert self.burst is not None
        answer = self.burst.decide(
            record, placer.verdicts(request), self.traits, lambda c: self.cache.placeable(c, now)
        )
        d = answer.decision
        if answer.changed:
            self._event(replace(record, updated_at=now), d.reason)
        if d.burst:
            if d.cluster is None or d.cluster == decision.cluster:
                return decision
            there = placer.place(replace(request, clusters=(d.cluster,)))
            return there if isinstance(there, Placement) else decision
        self._no_fit[record.id] = (self.cache.generation, now)
        if record.reason == d.reason:
            return None
        try:
            return self._save(replace(record, reason=d.reason, updated_at=now))
        except Conflict:
            return None  # another placer moved it meanwhile

    def _assume_into(self, placer: BatchPlacer, cluster: str, now: float) -> None:
        fresh = self.cache.placeable(cluster, now)
        if fresh is not None:
            placer.update(self._charged(fresh))

    def _charge_quota(self, record: JobRecord, where: Placement) -> None:
        """Assume a placement into its tenant namespace's quota (the namespace-quota filter reads it)
        while its reservation lives: the member cluster's quota status counts the pods only once they
        exist, and a second job must not be placed on the same room meanwhile."""
        summary = self.cache.placeable(where.cluster, self.clock.now())
        traits = self.traits.get(where.cluster)
        if summary is None or traits is None:
            return
        namespace = traits.namespace_for(record.request.tenant)
        found = summary.namespace(namespace)
        if found is None or not found.quotas:
            return
        requests, limits = member_quota.effective_pod(
            record.request, where.resource_name, where.units_per_pod, found, traits.dra
        )
        usage = member_quota.quota_usage(requests, limits, where.pods)
        self._quota_charges[record.id] = (where.cluster, namespace, usage)

    def _charged(self, summary: ClusterSummary) -> ClusterSummary:
        """The summary with the quota charges of its live reservations; a charge whose reservation is
        gone (the pods are counted by the cluster now, or the placement failed) is dropped."""
        state = self.cache.state(summary.cluster)
        live = {r.job_id for r in state.reservations} if state is not None else set()
        for job_id, (cluster, namespace, usage) in list(self._quota_charges.items()):
            if cluster != summary.cluster:
                continue
            if job_id not in live:
                del self._quota_charges[job_id]
                continue
            summary = member_quota.charge(summary, namespace, usage)
        return summary

    def _offered_fleet(self) -> str:
        """What a parked job waits to change: the fleet's structure and which clusters are fenced (a
        job that fits only a fenced cluster must be decided again once its fence is lifted)."""
        return f"{self.cache.fingerprint()} fenced:{','.join(sorted(self._fenced))}"

    def _not_placed(
        self, record: JobRecord, decision: NoFit, now: float, recorder: telemetry.PhaseRecorder
    ) -> JobRecord | None:
        if decision.never_fits:
            self._parked[record.id] = self._offered_fleet()
        else:
            self._no_fit[record.id] = (self.cache.generation, now)
        held = self._maybe_preempt(record, decision, now)  # a storm limit's words join the diagnosis
        decision_message = decision.message if held is None else f"{decision.message} {held}"
        if record.reason != decision_message:
            if not record.reason.startswith("0/"):  # it just became unplaceable, not a retry
                telemetry.unplaceable.inc()
            recorder.emit(record.trace_parent, "unplaceable", **{"gpufed.reason": decision_message})
            try:
                return self._save(replace(record, reason=decision_message, updated_at=now))
            except Conflict:
                return None  # another placer moved it meanwhile
        return None

    def _maybe_preempt(self, record: JobRecord, decision: NoFit, now: float) -> str | None:
        """A job of a preempting priority class that fits nowhere evicts the cheapest lower-priority
        running jobs of one cluster (broker.preemption); the victims go back to the queue under their
        failover policy and the job is placed by the next passes, first by its priority. Returns the
        storm limit's words when a limit holds the preemption back, else None."""
        policy = self.settings.preemption
        if policy is None or decision.never_fits or not policy.may_preempt(record.request):
            return None
        since = self._preempted_for.get(record.id)
        if since is not None and now - since < _PREEMPT_SETTLE_SECONDS:
            return None  # its victims are still on their way out
        queue = self.settings.queue_policy()
        priority = queue.priority(record.request)
        running = [r for r in self.store.list_jobs([JobState.RUNNING]) if r.state is JobState.RUNNING]
        victims = [
            preemption.Victim(
                r.id,
                r.request.tenant,
                r.cluster,
                r.placement.product,
                r.placement.total_units,
                queue.priority(r.request),
                r.updated_at,
            )
            for r in running
            if r.cluster and r.placement is not None and r.placement.resource_name == GPU
        ]
        summaries = [self._charged(s) for s in self.cache.placeable_all(now) if s.cluster not in self._fenced]
        capacity, _ = queueing.fleet_capacity(summaries)
        held: dict[str, int] = {}
        for v in victims:
            held[v.tenant] = held.get(v.tenant, 0) + v.gpus
        present = set(held) | {record.request.tenant}
        shares = preemption.fair_shares(held, {t: queue.weight(t) for t in present}, capacity.get("*", 0))
        over = frozenset(t for t, (share, fair) in shares.items() if share > fair)
        choice = preemption.choose(record.request, priority, summaries, victims, over, now)
        if isinstance(choice, str):
            return None
        refused = preemption.storm_refusal(
            record.request.tenant, len(choice.victims), self._preemptions, policy, now
        )
        if refused is not None:
            telemetry.preemptions_held.inc()
            return refused
        telemetry.preemptions.labels(choice.cluster).inc(len(choice.victims))
        self._preemptions = [p for p in self._preemptions if now - p[0] < policy.window_seconds]
        self._preemptions.append((now, record.request.tenant, len(choice.victims)))
        self._preempted_for[record.id] = now
        why = (
            f"preempted by {record.id} (priority {priority}) to free {choice.freed} {choice.product} "
            f"on {choice.cluster}"
        )
        by_id = {r.id: r for r in running}
        for v in choice.victims:
            victim = by_id[v.job_id]
            name = victim.workload_name
            if self._fail_over(victim, why, at=now) is not None and name:
                self.dispatcher.submit(
                    choice.cluster, functools.partial(self._delete_workload, choice.cluster, name, victim)
                )
        self._event(
            record,
            f"preempting {len(choice.victims)} job(s) on {choice.cluster} to free {choice.freed} "
            f"{choice.product} ({choice.gpu_hours_lost:.1f} GPU-hours lost): "
            + ", ".join(v.job_id for v in choice.victims),
        )
        log.info("%s preempted %s on %s", record.id, [v.job_id for v in choice.victims], choice.cluster)
        return None

    def _reserve(self, record: JobRecord, where: Placement, now: float) -> tuple[Reservation, ReserveResult]:
        """Compare-and-set the placement's reservation at the (version, ledger) it was decided on."""
        reservation = Reservation(
            job_id=record.id,
            attempt=record.attempt + 1,
            cluster=where.cluster,
            product=where.product,
            resource_name=where.resource_name or "none",
            units=max(1, where.total_units),
            created_at=now,
            # a placement into a pool's scale-up headroom is held while its node is provisioned, too
            expires_at=now
            + self.settings.reservation_ttl_seconds
            + (self.burst.provisioning_delay(where.cluster) if self.burst is not None else 0.0),
            pods=max(1, where.pods),
            owner=self.placer_id,
        )
        state = self.cache.state(where.cluster)
        if state is None:
            return reservation, ReserveResult(ReserveResult.NO_CLUSTER, 0, 0)
        with telemetry.job_span(
            "gpufed.job.reserve", record.trace_parent, **{"gpufed.cluster": where.cluster}
        ) as span:
            result = self.store.reserve(reservation, now, state.summary.version, state.ledger)
            span.set_attribute("gpufed.reserved", result.status)
        return reservation, result

    def _commit(self, record: JobRecord, where: Placement, now: float) -> JobRecord | None:
        """Record PLACED (compare-and-set from QUEUED) and hand the create to the dispatcher."""
        attempt = record.attempt + 1
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
            self.store.release(record.id, attempt, self.placer_id)
            return None  # cancelled meanwhile, or another replica took it
        faults.point("placed")
        self.dispatcher.submit(where.cluster, lambda: self._create(placed, where))
        return placed

    def resume_dispatch(self) -> int:
        """Submit the create of every PLACED job again (a new leader resumes its predecessor's creates;
        a create is idempotent). Returns how many were submitted."""
        count = 0
        for record in self.store.list_jobs([JobState.PLACED]):
            if record.state is JobState.PLACED and record.cluster in self.traits and record.placement:
                where = record.placement
                self.dispatcher.submit(where.cluster, functools.partial(self._create, record, where))
                count += 1
        return count

    def _create(self, placed: JobRecord, where: Placement) -> None:
        """The member-cluster half of a placement (on a dispatcher thread): create the Job; on failure
        release and requeue with backoff; if the job was cancelled meanwhile, delete what was created."""
        attempt = placed.attempt
        name = placed.workload_name or hints.workload_name(placed.id, attempt)
        traits = self.traits.get(where.cluster)
        try:
            if traits is None:  # it left the fleet since the placement (ClusterProfile deleted): requeue
                raise ClusterRejected(where.cluster, "no longer a member cluster")
            manifests = hints.build_workload(
                placed.id,
                attempt,
                placed.request,
                where,
                traits,
                hints.recovery_annotations(
                    placed.request, placed.created_at, placed.idempotency_key, self.settings.federation
                ),
            )
            finished_ttl.apply(manifests.job, self.settings.finished_job_ttl_seconds)
            with (
                telemetry.job_context(placed.trace_parent),
                telemetry.job_span(
                    "gpufed.job.dispatch", placed.trace_parent, **{"gpufed.cluster": where.cluster}
                ),
                telemetry.dispatch_latency.labels(where.cluster).time(),
            ):
                self.gateway.create_workload(where.cluster, manifests.job, manifests.companions)
            faults.point("created")
        except ClusterError as exc:
            with telemetry.job_context(placed.trace_parent):
                log.warning("dispatch of %s to %s failed: %s", placed.id, where.cluster, exc)
            telemetry.dispatch_failures.labels(where.cluster).inc()
            self.store.release(placed.id, attempt, self.placer_id)
            failures = placed.dispatch_failures + 1
            backoff = min(DISPATCH_BACKOFF_MAX_SECONDS, 2.0**failures)
            with contextlib.suppress(Conflict):  # cancelled meanwhile: nothing to requeue
                self._transition(
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
            return
        current = self.store.get_job(placed.id)
        if current is None or current.state is JobState.CANCELLED or current.workload_name != name:
            # Cancelled while the Job was being created: cancel() may have deleted before our create.
            self.store.release(placed.id, attempt, self.placer_id)
            self._delete_workload(where.cluster, name, current or placed)

    # ------------------------------------------------------------------ clusters: health, failover, fences

    def cluster_health(self) -> dict[str, ClusterHealth]:
        """Every declared cluster's effective health now (the poller's verdict, overruled by freshness)."""
        return self._cluster_health({s.cluster: s for s in self.store.observed_summaries()})

    def _cluster_health(self, summaries: dict[str, ClusterSummary]) -> dict[str, ClusterHealth]:
        now = self.clock.now()
        return {
            c: failover.effective_health(c, summaries.get(c), now, self.settings.cluster_lost_seconds)
            for c in sorted(self.traits)
        }

    def seconds_until_a_loss(self) -> float | None:
        """Seconds until the earliest moment a cluster seen failing in the last observe_clusters becomes
        lost (no success meanwhile), or None: the control loop wakes then, not at its next pass."""
        if self._next_loss_at is None:
            return None
        return max(0.0, self._next_loss_at - self.clock.now())

    def observe_clusters(self) -> list[JobRecord]:
        """The failover step: note health changes, fail over the jobs of lost clusters (and fence them),
        and start the sweep of fenced clusters that answer again. Returns the jobs moved."""
        now = self.clock.now()
        summaries = {s.cluster: s for s in self.store.observed_summaries()}
        healths = self._cluster_health(summaries)
        for h in healths.values():
            self._note_health(h)
        fenced = self.store.fenced()
        deadlines = [
            d
            for c in self.traits
            if c not in fenced
            and (d := failover.loss_deadline(summaries.get(c), self.settings.cluster_lost_seconds))
            is not None
            and d > now
        ]
        self._next_loss_at = min(deadlines, default=None)
        lost_after = self.settings.cluster_lost_seconds
        self._note_blindness(failover.pollers_silent(summaries.values(), now, lost_after))
        lost = {c: h for c, h in healths.items() if failover.is_lost(h, now, lost_after, self._blind)}
        moved: list[JobRecord] = []
        if lost:
            for record in self.store.list_jobs([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING]):
                gone = lost.get(record.cluster or "")
                if gone is None:
                    continue
                try:
                    # every job's event carries the instant the cluster was found lost, not the moment
                    # its own write came round in this pass
                    step = self._fail_over(record, f"cluster {gone.cluster} lost: {gone.text}", at=now)
                except (StoreError, Fenced):
                    raise
                except Exception:
                    log.exception("failing over %s failed; retried next pass", record.id)
                    continue
                if step is not None:
                    moved.append(step)
            for c, h in lost.items():
                if c not in fenced and self.store.fence(c, h.text):
                    fenced[c] = h.text
                    log.warning("cluster %s fenced: %s; its jobs were failed over", c, h.text)
                    self.store.append_cluster_event(ClusterEvent(c, now, h.health, f"fenced: {h.text}"))
        for c in fenced:
            back = healths.get(c)
            if c in self.traits and back is not None and failover.may_unfence(back):
                self.dispatcher.submit_once(c, "unfence", functools.partial(self._sweep_and_unfence, c))
        self._fenced = set(fenced)
        return moved

    def _note_blindness(self, blind: bool) -> None:
        if blind and not self._blind:
            log.warning(
                "no poller has written a summary for %g s: the broker cannot see its clusters (pollers, "
                "Ray or their path to Redis stalled); no cluster is failed over for silence until one "
                "reports again",
                self.settings.cluster_lost_seconds,
            )
        elif self._blind and not blind:
            log.info("the pollers report again: silent clusters are judged as usual")
        self._blind = blind

    def _note_health(self, h: ClusterHealth) -> None:
        previous = self._health_seen.get(h.cluster)
        self._health_seen[h.cluster] = h.health
        if previous is None or previous == h.health:
            return
        level = logging.INFO if h.health in (Health.HEALTHY, Health.DEGRADED) else logging.WARNING
        log.log(level, "cluster %s: %s -> %s", h.cluster, previous, h.text)
        self.store.append_cluster_event(ClusterEvent(h.cluster, self.clock.now(), h.health, h.reason))

    def _fail_over(self, record: JobRecord, why: str, at: float) -> JobRecord | None:
        """Apply the job's failover policy (lifecycle.failover) to a job that lost its place at `at` (the
        time its event carries): its cluster lost, its pods preempted, its tenant's hard budget spent. An
        attempt on a priced cluster is paid for up to `at` (counted once per attempt)."""
        step = lifecycle.failover(record, why)
        if self.burst is not None and record.state in (JobState.ADMITTED, JobState.RUNNING):
            self.burst.job_ended(record, step.state, at, self.traits)  # one that never started costs nothing
        self.store.release(record.id, record.attempt)
        faults.point("failed-over")
        # The attempt in the lost cluster is forgotten either way: the sweep deletes it when it answers.
        target = replace(record, placement=None, workload_name=None)
        if step.state is JobState.QUEUED:
            target = replace(target, cluster=None)
        try:
            return self._transition(
                target,
                step.state,
                step.reason,
                expected=record.state,
                expected_attempt=record.attempt,
                at=at,
            )
        except Conflict:
            return None  # it moved on meanwhile (finished, cancelled, placed again)

    def _sweep_and_unfence(self, cluster: str) -> None:
        """Fencing: delete the stale attempts in a cluster that came back, and only then offer it again."""
        deleted = self.sweep_cluster(cluster, raise_errors=True)
        if self.store.unfence(cluster):
            reason = f"fence lifted: {len(deleted)} stale attempt(s) deleted"
            log.info("cluster %s: %s", cluster, reason)
            self.store.append_cluster_event(ClusterEvent(cluster, self.clock.now(), Health.HEALTHY, reason))

    # ------------------------------------------------------------------ following placed jobs

    def sync_status(self) -> list[JobRecord]:
        """Follow every placed job in its member cluster, each cluster on its own worker (one slow cluster
        delays only its own jobs). Returns the jobs that changed state (with the inline dispatcher)."""
        changed: list[JobRecord] = []
        self._release_settled()
        by_cluster: dict[str, list[JobRecord]] = {}
        skip = self._unavailable_clusters() | self._fenced
        for record in self.store.list_jobs([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING]):
            self._tenants_seen.add(record.request.tenant)
            if record.cluster and record.cluster not in skip:
                by_cluster.setdefault(record.cluster, []).append(record)
        for cluster, records in sorted(by_cluster.items()):
            self.dispatcher.submit_once(cluster, "sync", functools.partial(self._sync_into, records, changed))
        return changed

    def _sync_into(self, records: list[JobRecord], changed: list[JobRecord]) -> None:
        changed.extend(self._sync_cluster(records))

    def _sync_cluster(self, records: list[JobRecord]) -> list[JobRecord]:
        changed: list[JobRecord] = []
        for record in records:
            try:
                with telemetry.job_context(record.trace_parent):
                    step = self._sync_job(record)
            except (StoreError, Fenced):
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
        namespace = self._namespace(record.cluster, record.request.tenant)
        try:
            status = self.gateway.read_workload(record.cluster, namespace, record.workload_name)
        except ClusterError as exc:
            if record.cluster not in self._unreadable:  # said once, not per job per pass, until it answers
                self._unreadable.add(record.cluster)
                log.info(
                    "cannot read %s on %s: %s; its Jobs are read again every pass",
                    record.workload_name,
                    record.cluster,
                    exc,
                )
            return None
        if record.cluster in self._unreadable:
            self._unreadable.discard(record.cluster)
            log.info("Jobs on %s can be read again", record.cluster)
        step = lifecycle.observe(record, status, self.clock.now())
        if step is None:
            return None
        faults.point("observed")
        if self.burst is not None and (step.state.terminal or step.state is JobState.QUEUED):
            self.burst.job_ended(record, step.state, self.clock.now(), self.traits)
        if step.state is JobState.RUNNING:
            self._settle(record)
        elif step.state is JobState.QUEUED or step.state.terminal:
            with self._settling_lock:
                self._settling.pop((record.id, record.attempt), None)
            self.store.release(record.id, record.attempt)
        target = record
        if step.state is JobState.QUEUED:
            target = replace(record, cluster=None, placement=None, workload_name=None)
        try:
            # the state AND the attempt read: a read that hung on a cluster while the job moved on to a
            # new attempt (now in the same state elsewhere) must not write the old attempt back
            return self._transition(
                target, step.state, step.reason, expected=record.state, expected_attempt=record.attempt
            )
        except Conflict:
            return None  # cancelled or moved on meanwhile

    def adopt_settling(self, record: JobRecord) -> None:
        """A new leader adopts the reservation of a job its predecessor saw RUNNING (the settling list
        lives in memory): it goes once the cluster's summary is newer, as _settle would have done."""
        self._settle(record)

    def _settle(self, record: JobRecord) -> None:
        """The job's pods are all ready: its reservation may go once its cluster's summary counts them.
        Released at once, a summary published before the pods were seen would show their GPUs free (the
        Job's status reaches the broker sooner than the pods reach the pollers' summary)."""
        cluster = record.cluster or ""
        pair = self.store.cluster_versions([cluster]).get(cluster)
        if pair is None:
            self.store.release(record.id, record.attempt)
            return
        with self._settling_lock:
            self._settling[(record.id, record.attempt)] = (cluster, pair[0])

    def _release_settled(self) -> None:
        """Release the reservations of running jobs whose cluster has published a newer summary."""
        with self._settling_lock:
            settling = dict(self._settling)
        if not settling:
            return
        versions = self.store.cluster_versions(sorted({c for c, _ in settling.values()}))
        for key, (cluster, seen) in settling.items():
            pair = versions.get(cluster)
            if pair is None or pair[0] > seen:
                self.store.release(*key)
                with self._settling_lock:
                    self._settling.pop(key, None)

    def sweep_orphans(self) -> list[str]:
        """Delete the broker's Jobs that no current attempt owns (see lifecycle.orphan_reason), in every
        declared cluster that answers, each cluster on its own worker. Returns "cluster/name" of each Job
        deleted (with the inline dispatcher; the concurrent one logs them)."""
        deleted: list[str] = []
        self.store.prune_expired(self.clock.now())
        down = self._unavailable_clusters()
        for cluster in sorted(self.traits):
            if cluster not in down:
                self.dispatcher.submit_once(
                    cluster, "sweep", functools.partial(self._sweep_into, cluster, deleted)
                )
        return deleted

    def _sweep_into(self, cluster: str, deleted: list[str]) -> None:
        deleted.extend(self.sweep_cluster(cluster))

    def sweep_cluster(self, cluster: str, raise_errors: bool = False) -> list[str]:
        """The sweep of one cluster: list the broker's Jobs there *before* reading their records, delete
        each one no current attempt owns. With raise_errors a failed list or delete raises (the fence
        stays up); else it is logged and the next sweep retries."""
        deleted: list[str] = []
        traits = self.traits[cluster]
        try:
            refs = [  # before the records; every namespace a tenant's Jobs may be in
                ref
                for namespace in traits.namespaces_for(self._tenants_known())
                for ref in self.gateway.list_workloads(cluster, namespace)
            ]
        except ClusterError as exc:
            if raise_errors:
                raise
            log.info("cannot list Jobs on %s for the sweep: %s", cluster, exc)
            return deleted
        for ref in refs:
            record = self.store.get_job(ref.job_id)
            reason = lifecycle.orphan_reason(ref, record)
            if reason is None or record is None:
                continue
            try:
                self.gateway.delete_workload(cluster, ref.namespace, ref.name)
            except ClusterError as exc:
                if raise_errors:
                    raise
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

    def _namespace(self, cluster: str, tenant: str) -> str:
        """The namespace a tenant's Jobs are in on a cluster (its tenant namespace, docs/tenancy.md)."""
        traits = self.traits.get(cluster)
        return traits.namespace_for(tenant) if traits is not None else "default"

    def _tenants_known(self) -> set[str]:
        """The tenants whose namespaces the sweep lists: configured ones and those seen in the queue or
        running since this service started."""
        return set(self.settings.queue_policy().tenants) | self._tenants_seen

    def _unavailable_clusters(self) -> set[str]:
        """Clusters whose pollers report them unreachable or forbidden, or that went silent: calls to
        them would only time out."""
        return {c for c, h in self.cluster_health().items() if failover.lost_health(h)}

    def _transition(
        self,
        record: JobRecord,
        state: JobState,
        reason: str,
        expected: JobState | None = None,
        expected_attempt: int | None = None,
        at: float | None = None,
    ) -> JobRecord:
        now = self.clock.now() if at is None else at
        changed = replace(record, state=state, reason=reason, updated_at=now)
        with telemetry.job_span(
            "gpufed.job.state", record.trace_parent, **{"gpufed.state": str(state), "gpufed.reason": reason}
        ):
            saved = self.store.save_job(changed, expected, self._event_of(changed, reason), expected_attempt)
            telemetry.transitions.labels(str(state)).inc()
        return saved

    def _save(self, record: JobRecord) -> JobRecord:
        return self.store.save_job(record, record.state)

    @staticmethod
    def _event_of(record: JobRecord, reason: str) -> JobEvent:
        return JobEvent(
            job_id=record.id,
            at=record.updated_at,
            state=record.state,
            attempt=record.attempt,
            reason=reason,
            cluster=record.cluster,
            trace_id=telemetry.trace_id_of(record.trace_parent),
        )

    def _event(self, record: JobRecord, reason: str) -> None:
        self.store.append_event(self._event_of(record, reason))
