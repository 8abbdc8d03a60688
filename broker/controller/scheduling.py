"""The scheduling pass (Kueue's cycle): place the QUEUED jobs in queue order.

The FleetCache is refreshed incrementally (only clusters whose summary version or reservation ledger
moved are read), the QUEUED jobs come from the leader's records in queue order (broker.queue.queueing:
priority, fair share across tenants, age; a job a quota holds back keeps the rule as its reason) and
are decided one after another by a BatchPlacer over the cache's placeable view, each decision held in
the cache and the placer so that the next one sees it. Up to RESERVE_BATCH decisions are then reserved
together: one compare-and-set per cluster at exactly the state they were decided on, all clusters in one
round trip (a cluster that moved meanwhile is read again and its jobs decided again); the reserved jobs
are recorded PLACED in one round trip and handed to the Dispatcher (broker.controller.dispatching). A
pass places at most PLACED_PER_PASS jobs, so that status sync runs between the passes of a large burst. A job that can never fit the fleet is parked until the
fleet's structure changes; one that can't fit now is not looked at again until the cache changes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from broker import telemetry
from broker.controller import faults
from broker.controller.dispatching import Dispatching
from broker.controller.preempting import Preempting
from broker.core.errors import (
    Conflict,
    Fenced,
    StoreError,
)
from broker.core.k8s_names import DRA_GPU_CLASS, GPU
from broker.core.model import (
    ClusterSummary,
    JobRecord,
    JobRequest,
    JobState,
    NoFit,
    Placement,
    Reservation,
)
from broker.core.ports import ReserveBatch, ReserveResult
from broker.health import failover
from broker.queue import queueing
from broker.queue.array_cap import ArrayCap
from broker.scheduler.batch_placement import BatchPlacer
from broker.tenancy import member_quota
from broker.workload import gpu_moves, member_trouble

log = logging.getLogger(__name__)

# How often one job is decided again in a pass when its cluster changed between decision and reserve.
_RESERVE_ATTEMPTS = 3
# Decisions reserved together (one round trip for their reservations, one for their PLACED writes).
RESERVE_BATCH = 256
# Jobs placed in one pass at most: the rest wait for the next pass, which comes at once (the work queue
# is woken), after the other steps (status sync) had their turn.
PLACED_PER_PASS = 1024
# A job that could not fit is looked at again when the cache changed, or after this long regardless
# (reservations expire without any write).
_NOFIT_RECHECK_SECONDS = 5.0


@dataclass
class _Decided:
    """A job decided in this pass and held in the cache, waiting for its batch's reserve."""

    record: JobRecord
    placement: Placement
    reservation: Reservation
    recorder: telemetry.PhaseRecorder
    products: tuple[str, ...] | None
    tries: int


class Scheduling(Preempting, Dispatching):
    def queue_due(self) -> bool:
        """Whether a pass that nothing woke must schedule anyway (broker.controller.control_loop): jobs
        wait in the queue (their backoffs and parked fits are judged by schedule_once itself)."""
        return not self.records.built or self.records.count(JobState.QUEUED) > 0

    def schedule_once(self) -> list[JobRecord]:
        """One scheduling pass over every QUEUED job, in queue order. Returns the jobs that changed."""
        self._apply_pending_traits()
        self.records.ensure()  # the jobs other writers changed since the last pass (submits, cancels)
        queued = self.records.in_states([JobState.QUEUED])
        self._tenants_seen.update(r.request.tenant for r in queued)
        waiting = {r.id for r in queued}
        self._parked = {j: fp for j, fp in self._parked.items() if j in waiting}
        self._no_fit = {j: g for j, g in self._no_fit.items() if j in waiting}
        if not queued:
            return []
        now = self.clock.now()
        self._fresh_cache()
        self._pass_fences = self._fences_key()
        fleet = self._offered_fleet()
        placeable = self.cache.placeable_all(now)
        offered = [self._charged(s) for s in placeable if s.cluster not in self._fenced]
        for s in offered:
            if s.heartbeat:
                telemetry.capacity_freshness.labels(s.cluster).observe(max(0.0, now - s.heartbeat))
        # fenced clusters are placed on by no one, but counted in every reason (as explain counts them)
        fences = {c: self._fence_reasons.get(c, "fenced") for c in self._fenced}
        placer = BatchPlacer(
            failover.placement_view(offered, placeable, fences), self.traits, self.policy, now
        )
        changed: list[JobRecord] = []
        slots = self._queue_plan(queued, offered)  # priority, fair share, age; quotas (queueing)
        if self.burst is not None:
            fenced = failover.fenced_for_placement(placeable, fences)
            self.burst.begin_pass(now, [s.record for s in slots], self._placed_jobs, offered, fenced)
        decided: list[_Decided] = []
        placed = 0
        arrays = ArrayCap(self._array_members()) if any(r.request.batch.parallelism for r in queued) else None
        for slot in slots:
            record = slot.record
            if placed + len(decided) >= PLACED_PER_PASS:
                self.work.wake()  # the rest in the next pass, once the other steps ran
                break
            if slot.blocked is not None:
                changed.extend(self._hold(record, slot.blocked, now))
                continue
            if now < record.not_before:
                continue  # backing off after a failed dispatch
            capped = arrays.blocked(record) if arrays is not None else None
            if capped is not None:  # its array's parallelism is reached (docs/batch.md)
                changed.extend(self._hold(record, capped, now))
                continue
            if self._parked.get(record.id) == fleet:
                continue  # can never fit this fleet: wait for the fleet to change
            seen = self._no_fit.get(record.id)
            if (
                seen is not None
                and seen[:2] == (self.cache.generation, self._pass_fences)
                and now - seen[2] < _NOFIT_RECHECK_SECONDS
            ):
                continue  # nothing changed since it did not fit (a fence set or lifted is a change)
            before = len(decided)
            step = self._decide_isolated(record, placer, now, slot.products, decided, 1)
            if step is not None:
                changed.append(step)
            if arrays is not None and len(decided) > before:
                arrays.take(record)
            if len(decided) >= RESERVE_BATCH:
                done = self._reserve_decided(decided, placer, now)
                placed += sum(1 for r in done if r.state is JobState.PLACED)
                changed.extend(done)
                decided = []
        changed.extend(self._reserve_decided(decided, placer, now))
        return changed

    def _decide_isolated(
        self,
        record: JobRecord,
        placer: BatchPlacer,
        now: float,
        products: tuple[str, ...] | None,
        decided: list[_Decided],
        tries: int,
    ) -> JobRecord | None:
        """_decide with one job's fault kept to itself (logged; the others go on)."""
        try:
            with telemetry.job_context(record.trace_parent):  # its log lines carry its trace id
                return self._decide(record, placer, now, products, decided, tries)
        except (StoreError, Fenced):
            raise  # the store is down, or this replica is no longer the leader: nothing can progress
        except Exception:
            log.exception("placing %s failed; the other jobs go on and it is retried next pass", record.id)
            return None

    def _queue_plan(self, queued: list[JobRecord], offered: list[ClusterSummary]) -> list[queueing.Slot]:
        """The queue's order and quota verdicts for this pass, over the jobs holding GPUs now (the
        leader's records, or the store's for a service that does not lead)."""
        policy = self.settings.queue_policy()
        tenants = {r.request.tenant for r in queued}
        # What tenants hold matters only to share between several, or to quotas: one tenant without
        # quotas is ordered by priority and age, and the placed jobs need not be read.
        needs_usage = len(tenants) > 1 or any(policy.has_quotas(t) for t in tenants)
        active = self._placed_jobs() if needs_usage else []
        capacity, free = queueing.fleet_capacity(offered)
        return queueing.plan(queued, active, policy, capacity, free)

    def _array_members(self) -> list[JobRecord]:
        """The array members placed, admitted or running now (the leader's records)."""
        active = self.records.in_states([JobState.PLACED, JobState.ADMITTED, JobState.RUNNING], ordered=False)
        return [r for r in active if r.request.batch.parallelism is not None]

    def _hold(self, record: JobRecord, why: str, now: float) -> list[JobRecord]:
        """A job the queue holds back (a quota): its reason says which rule, saved when it changed."""
        if record.reason == why:
            return []
        try:
            return [self._save(replace(record, reason=why, updated_at=now))]
        except Conflict:
            return []  # another placer moved it meanwhile

    def _decide(
        self,
        record: JobRecord,
        placer: BatchPlacer,
        now: float,
        products: tuple[str, ...] | None,
        decided: list[_Decided],
        tries: int,
    ) -> JobRecord | None:
        """One placement decision: the job as changed when it is not placed (QUEUED with a new reason),
        else None; a placement is held in the cache and the placer and joins `decided` (reserved with its
        batch). `products`, when given, narrows the products it may use in this pass (the queue's quotas)."""
        self.evaluations += 1
        request = record.request if products is None else replace(record.request, gpu_products=products)
        if record.move_to:  # a moved job's next attempt (docs/migration.md): only these clusters
            request = replace(request, clusters=record.move_to)
        if record.avoid:  # clusters an attempt was withdrawn from lately (member trouble)
            request = replace(request, avoid_clusters=member_trouble.avoided(record, now))
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
        state = self.cache.state(decision.cluster)
        if state is None:
            return None  # gone from the cache since the placer's view was made
        avoid = gpu_moves.avoided_nodes(record, decision.cluster, state.summary.gpu_health, now)
        decision = replace(decision, avoid_nodes=avoid) if avoid else decision  # level 2: broken GPUs' nodes
        reservation = self._reservation(record, decision, now)
        self.cache.hold(reservation)
        self._charge_quota(record, decision)  # dropped by _charged once its hold is gone (refused)
        self._assume_into(placer, decision.cluster, now)
        decided.append(_Decided(record, decision, reservation, recorder, products, tries))
        return None

    def _reserve_decided(self, decided: list[_Decided], placer: BatchPlacer, now: float) -> list[JobRecord]:
        """Reserve a batch of decisions (one compare-and-set per cluster, one round trip), record the
        reserved ones PLACED (one round trip) and dispatch them; the jobs of a cluster that moved since it
        was read are decided again on what it is now (at most _RESERVE_ATTEMPTS decisions per job)."""
        changed: list[JobRecord] = []
        while decided:
            by_cluster: dict[str, list[_Decided]] = {}
            for d in decided:
                by_cluster.setdefault(d.placement.cluster, []).append(d)
            batches = []
            for cluster, items in by_cluster.items():
                state = self.cache.state(cluster)
                if state is not None:
                    reserving = tuple(d.reservation for d in items)
                    batches.append(ReserveBatch(cluster, state.summary.version, state.ledger, reserving))
            started = time.time_ns()
            answers = self.store.reserve_many(batches, now)
            won: list[_Decided] = []
            again: list[_Decided] = []
            for batch, results in zip(batches, answers, strict=True):
                items = by_cluster[batch.cluster]
                for d, result in zip(items, results, strict=True):
                    telemetry.job_span_done(
                        "gpufed.job.reserve",
                        d.record.trace_parent,
                        started,
                        **{"gpufed.cluster": batch.cluster, "gpufed.reserved": result.status},
                    )
                status = results[0].status if results else ReserveResult.RESERVED
                if status in (ReserveResult.STALE, ReserveResult.NO_CLUSTER):
                    self.cache.refresh_cluster(batch.cluster)  # it moved since it was read: decide again
                    self._assume_into(placer, batch.cluster, now)
                    if status == ReserveResult.STALE:
                        again.extend(d for d in items if d.tries < _RESERVE_ATTEMPTS)
                    continue
                refused = [d.record.id for d, r in zip(items, results, strict=True) if not r.ok]
                self.cache.settle(batch.cluster, refused, results[-1].ledger)
                if refused:  # another placer holds those jobs: the cluster was read again
                    self._assume_into(placer, batch.cluster, now)
                won.extend(d for d, r in zip(items, results, strict=True) if r.ok)
            changed.extend(self._commit_decided(won, now))
            decided = []
            # A cluster that moved under a batch is busy (a poller publishing while its pods start): its
            # jobs are decided again one at a time, each reserved at once, so the window between the read
            # and the reserve is one decision, not a batch's (a batch again would lose again and again).
            for d in again:
                one: list[_Decided] = []
                step = self._decide_isolated(d.record, placer, now, d.products, one, d.tries + 1)
                if step is not None:
                    changed.append(step)
                changed.extend(self._reserve_decided(one, placer, now))
        return changed

    def _commit_decided(self, won: list[_Decided], now: float) -> list[JobRecord]:
        """The reserved jobs recorded PLACED and dispatched, with their placement's telemetry."""
        for d in won:
            faults.point("reserved")
            d.recorder.emit(d.record.trace_parent, "placed", **{"gpufed.cluster": d.placement.cluster})
        placed = self._commit_many([(d.record, d.placement) for d in won], now)
        for d, done in zip(won, placed, strict=True):
            if done is None:
                continue
            telemetry.placements.labels(d.placement.cluster, d.placement.product).inc()
            if d.record.attempt == 0:
                telemetry.queue_wait.observe(max(0.0, now - d.record.created_at))
        return [p for p in placed if p is not None]

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
        self._no_fit[record.id] = (self.cache.generation, self._pass_fences, now)
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
            record.request, where.resource_name, where.units_per_pod, found, where.dra or traits.dra
        )
        usage = member_quota.quota_usage(requests, limits, where.pods)
        self._quota_charges[record.id] = (where.cluster, namespace, usage)

    def _offered_fleet(self) -> str:
        """What a parked job waits to change: the fleet's structure and which clusters are fenced (a
        job that fits only a fenced cluster must be decided again once its fence is lifted)."""
        return f"{self.cache.fingerprint()} fenced:{self._fences_key()}"

    def _fences_key(self) -> str:
        """The fenced clusters and why, as a key: a job's reason names them, so a change decides it again."""
        return ",".join(f"{c}={self._fence_reasons.get(c, '')}" for c in sorted(self._fenced))

    def _not_placed(
        self, record: JobRecord, decision: NoFit, now: float, recorder: telemetry.PhaseRecorder
    ) -> JobRecord | None:
        if decision.never_fits:
            self._parked[record.id] = self._offered_fleet()
        else:
            self._no_fit[record.id] = (self.cache.generation, self._pass_fences, now)
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

    def _reservation(self, record: JobRecord, where: Placement, now: float) -> Reservation:
        """The reservation of a placement: its next attempt's, held by this placer until it expires."""
        return Reservation(
            job_id=record.id,
            attempt=record.attempt + 1,
            cluster=where.cluster,
            product=where.product,
            # whole GPUs through a claim are held as the DeviceClass's (their kind: cache.reservations)
            resource_name=DRA_GPU_CLASS
            if where.dra and where.resource_name == GPU
            else where.resource_name or "none",
            units=max(1, where.total_units),
            created_at=now,
            # a placement into a pool's scale-up headroom is held while its node is provisioned, too
            expires_at=now
            + self.settings.reservation_ttl_seconds
            + (self.burst.provisioning_delay(where.cluster) if self.burst is not None else 0.0),
            pods=max(1, where.pods),
            owner=self.placer_id,
            clique=where.clique,
        )
