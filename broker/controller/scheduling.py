"""The scheduling pass (Kueue's cycle): place the QUEUED jobs in queue order.

The FleetCache is refreshed incrementally (only clusters whose summary version or reservation ledger
moved are read), the QUEUED jobs come from the leader's records in queue order (broker.queue.queueing:
priority, fair share across tenants, age; a job a quota holds back keeps the rule as its reason) and
are placed one after another by a BatchPlacer over the cache's placeable view; each placement is
reserved by compare-and-set at exactly the state it was decided on (a cluster that moved is read again
and the job decided again), assumed into the cache and the placer, recorded PLACED and handed to the
Dispatcher (broker.controller.dispatching). A job that can never fit the fleet is parked until the
fleet's structure changes; one that can't fit now is not looked at again until the cache changes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from broker import telemetry
from broker.controller import faults
from broker.controller.dispatching import Dispatching
from broker.controller.preempting import Preempting
from broker.core.errors import (
    Conflict,
    Fenced,
    StoreError,
)
from broker.core.model import (
    ClusterSummary,
    JobRecord,
    JobRequest,
    JobState,
    NoFit,
    Placement,
    Reservation,
)
from broker.core.ports import ReserveResult
from broker.health import failover
from broker.queue import queueing
from broker.scheduler.batch_placement import BatchPlacer
from broker.tenancy import member_quota
from broker.workload import member_trouble

log = logging.getLogger(__name__)

# How often one job is decided again in a pass when its cluster changed between decision and reserve.
_RESERVE_ATTEMPTS = 3
# A job that could not fit is looked at again when the cache changed, or after this long regardless
# (reservations expire without any write).
_NOFIT_RECHECK_SECONDS = 5.0


class Scheduling(Preempting, Dispatching):
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
        fleet = self._offered_fleet()
        placeable = self.cache.placeable_all(now)
        offered = [self._charged(s) for s in placeable if s.cluster not in self._fenced]
        for s in offered:
            if s.heartbeat:
                telemetry.capacity_freshness.labels(s.cluster).observe(max(0.0, now - s.heartbeat))
        # fenced clusters are placed on by no one, but counted in every reason (as explain counts them)
        placer = BatchPlacer(
            [*offered, *failover.fenced_for_placement(placeable, self._fenced)], self.traits, self.policy, now
        )
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
        if record.move_to:  # a moved job's next attempt (docs/migration.md): only these clusters
            request = replace(request, clusters=record.move_to)
        if record.avoid:  # clusters an attempt was withdrawn from lately (member trouble)
            request = replace(request, avoid_clusters=member_trouble.avoided(record, now))
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
            clique=where.clique,
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
