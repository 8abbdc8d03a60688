"""The API's read views over one published fleet snapshot and the jobs: fleet, clusters, explain,
queue positions and predicted starts, spend, the metrics sample.

Every view reads the same FleetSnapshot (broker.cache.fleet_snapshot: the placeable model the
scheduler places on, refreshed incrementally), so `explain`, the queue positions and `/v1/fleet` agree
with each other and with the scheduler. The queue's view (each queued job's position and reason, its
predicted on-prem start) is computed once per snapshot and at most once a second however many readers
poll (the dashboard, `gpufed get`), unless a job asked about is not in it yet (submitted since). A
list page does not wait for a view that is merely stale: it shows the last one, computed again behind it.

Owns no decision: queueing.plan, placement.explain_and_decide, failover.effective_health and the
burst gate decide; this module feeds them the snapshot and shapes nothing but what they return.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from broker import telemetry
from broker.api.schemas import node_view, summary_view
from broker.burst.gate import BurstGate
from broker.burst.spend import TenantSpend
from broker.burst.wait_prediction import Prediction
from broker.cache.fleet_snapshot import FleetSnapshot, SnapshotPublisher
from broker.cache.observed_fleet import ObservedFleet
from broker.core.errors import StoreError
from broker.core.model import ClusterSummary, ClusterTraits, JobRecord, JobRequest, JobState, NoFit, Placement
from broker.core.ports import Clock, StateStore
from broker.health import failover
from broker.health.failover import ClusterHealth
from broker.queue import queueing
from broker.queue.tenant_view import TenantFigures, tenant_figures
from broker.scheduler import placement

__all__ = ["FleetViews"]

log = logging.getLogger(__name__)

QUEUE_VIEW_TTL_SECONDS = 1.0  # the queue view is computed again at most this often
# A list page shows a queue view up to this old (computed again behind it): with several tenants the
# plan reads every placed job, and a dashboard walking pages must not make that a per-second cost.
LIST_QUEUE_VIEW_MAX_AGE_SECONDS = 5.0
_ACTIVE = [JobState.PLACED, JobState.ADMITTED, JobState.RUNNING]


def _fenced(fleet: FleetSnapshot) -> list[ClusterSummary]:
    """The clusters not offered now, as placement and the predictions see them (failover)."""
    return failover.fenced_for_placement(
        [s for s in fleet.observed if s.cluster in fleet.fenced], fleet.fenced
    )


@dataclass(frozen=True)
class _QueueView:
    fleet: FleetSnapshot
    at: float
    slots: dict[str, queueing.Slot]
    predicted: dict[str, Prediction] | None = None


class FleetViews:
    def __init__(
        self,
        store: StateStore,
        clock: Clock,
        traits: Callable[[], Mapping[str, ClusterTraits]],
        queue_policy: Callable[[], queueing.QueuePolicy],
        placement_policy: placement.PlacementPolicy,
        lost_after_seconds: float,
        burst: BurstGate | None = None,
    ) -> None:
        """`traits` and `queue_policy`: the declared clusters and the queue's rules now (a config
        reload changes them); `lost_after_seconds`: silence after which a cluster reads lost."""
        self._store = store
        self._clock = clock
        self._traits = traits
        self._queue_policy = queue_policy
        self._policy = placement_policy
        self._lost_after = lost_after_seconds
        self.burst = burst
        grow = burst.grow if burst is not None else None
        self.snapshots = SnapshotPublisher(store, clock, lambda: traits().keys(), grow=grow)
        # the observed summaries alone, for what does not need the reservations (never-fit at submit)
        self.observed = ObservedFleet(store, lambda: traits().keys())
        self._queue: _QueueView | None = None
        self._queue_lock = threading.Lock()
        self._refreshing = False  # a queue view is being computed behind a list page

    @classmethod
    def of(cls, service: Any) -> FleetViews:
        """The views beside a BrokerService (its store, clock, clusters, policies and burst gate)."""
        return cls(
            service.store,
            service.clock,
            lambda: service.traits,
            service.settings.queue_policy,
            service.policy,
            service.settings.cluster_lost_seconds,
            service.burst,
        )

    def ping(self) -> bool:
        """The store answers (readiness); raises StoreError with the cause when it does not."""
        return self._store.ping()

    @property
    def traits(self) -> Mapping[str, ClusterTraits]:
        return self._traits()

    # ------------------------------------------------------------------ the queue

    def _queued(self) -> list[JobRecord]:
        # the index and the records are read apart: a record may have moved on in between
        return [r for r in self._store.list_jobs([JobState.QUEUED]) if r.state is JobState.QUEUED]

    def _active(self) -> list[JobRecord]:
        return self._store.list_jobs(_ACTIVE)

    def tenant_figures(self, including: Iterable[str] = ()) -> list[TenantFigures]:
        """Each tenant's quota, use, borrowing and jobs, from the ledger the scheduling pass charges
        (`including`: tenants shown even without quota or jobs)."""
        capacity, _ = queueing.fleet_capacity(self.snapshots.current().placeable)
        pending = self._store.list_jobs([JobState.PENDING])
        policy = self._queue_policy()
        return tenant_figures(self._active(), self._queued(), pending, policy, capacity, including)

    def _plan(self, queued: list[JobRecord], fleet: FleetSnapshot) -> list[queueing.Slot]:
        """queueing.plan over the snapshot; the placed jobs are read only when shares or quotas need
        them (one tenant without quotas is ordered by priority and age)."""
        policy = self._queue_policy()
        tenants = {r.request.tenant for r in queued}
        needs_usage = len(tenants) > 1 or any(policy.has_quotas(t) for t in tenants)
        capacity, free = queueing.fleet_capacity(fleet.placeable)
        return queueing.plan(queued, self._active() if needs_usage else [], policy, capacity, free)

    def _queue_view(self, including: Iterable[str] = (), wait: bool = True) -> _QueueView:
        """The queue view: the memo while it is fresh (same snapshot, younger than the TTL) and holds
        every job asked about. A memo that holds them but is stale is computed again now (`wait`), or
        on a thread of its own while the caller gets the memo (a list page does not wait for the whole
        queue to be planned again); one that misses a job asked about is computed again now."""
        fleet = self.snapshots.current()
        now = self._clock.now()
        with self._queue_lock:
            q = self._queue
            complete = q is not None and all(i in q.slots for i in including)
            ttl = QUEUE_VIEW_TTL_SECONDS if wait else LIST_QUEUE_VIEW_MAX_AGE_SECONDS
            fresh = complete and q is not None and (q.fleet is fleet or not wait) and 0 <= now - q.at < ttl
            if q is not None and complete and (fresh or not wait):
                if not fresh and not self._refreshing:
                    self._refreshing = True
                    threading.Thread(
                        target=self._refresh_queue, name="gpufed-queue-view", daemon=True
                    ).start()
                return q
        return self._refresh_queue()

    def _refresh_queue(self) -> _QueueView:
        try:
            fleet = self.snapshots.current()
            now = self._clock.now()
            slots = {s.record.id: s for s in self._plan(self._queued(), fleet)}
            q = _QueueView(fleet, now, slots)
            with self._queue_lock:
                self._queue = q
            return q
        except StoreError:
            log.info("the queue view could not be read; the last one is shown", exc_info=True)
            raise
        finally:
            with self._queue_lock:
                self._refreshing = False

    def queue_slots(self, including: Iterable[str] = (), wait: bool = True) -> dict[str, queueing.Slot]:
        """Every queued job's place in the queue, by job id (see the module docstring for how often);
        wait=False: the last view computed, refreshed behind the caller when it is stale."""
        return self._queue_view(including, wait).slots

    def queue_predictions(self, including: Iterable[str] = (), wait: bool = True) -> dict[str, Prediction]:
        """Every queued job's predicted on-prem start, by job id (docs/burst.md); empty without a burst
        gate. Computed once per queue view."""
        if self.burst is None:
            return {}
        q = self._queue_view(including, wait)
        if q.predicted is not None:
            return q.predicted
        order = [s.record for s in sorted(q.slots.values(), key=lambda s: s.position)]
        predicted = self.burst.predict(
            self._clock.now(), order, self._active(), list(q.fleet.placeable), _fenced(q.fleet)
        )
        with self._queue_lock:
            if self._queue is q:
                self._queue = _QueueView(q.fleet, q.at, q.slots, predicted)
        return predicted

    # ------------------------------------------------------------------ dry runs

    def explain(self, request: JobRequest) -> tuple[Placement | NoFit, list[placement.ClusterVerdict]]:
        """Dry run: where the job would go now, and every cluster's verdict. Changes nothing."""
        fleet = self.snapshots.current()
        fenced = [s for s in fleet.observed if s.cluster in fleet.fenced]  # counted as the scheduler does
        view = failover.placement_view(fleet.placeable, fenced, fleet.fenced)
        return placement.explain_and_decide(request, view, self.traits, self._policy, self._clock.now())

    def _probe(self, request: JobRequest) -> tuple[JobRecord, list[queueing.Slot], FleetSnapshot]:
        now = self._clock.now()
        # "~" sorts after every job id: the probe stands behind the jobs submitted at the same instant
        probe = JobRecord(id="~explain", request=request, created_at=now, updated_at=now)
        fleet = self.snapshots.current()
        return probe, self._plan([*self._queued(), probe], fleet), fleet

    def explain_queue(self, request: JobRequest) -> queueing.Slot:
        """Where the job would stand in the queue if submitted now, and whether a quota would hold it."""
        probe, plan, _ = self._probe(request)
        return next(s for s in plan if s.record is probe)

    def explain_wait(self, request: JobRequest) -> Prediction | None:
        """When the job would start on-prem if submitted now, where and why (docs/burst.md); None
        without a burst gate or for a job the prediction does not model."""
        if self.burst is None:
            return None
        probe, plan, fleet = self._probe(request)
        order = [s.record for s in plan]
        predicted = self.burst.predict(
            self._clock.now(), order, self._active(), list(fleet.placeable), _fenced(fleet)
        )
        return predicted.get(probe.id)

    def spend(self) -> dict[str, TenantSpend]:
        """Each tenant's cloud spend this period (docs/burst.md); empty without a burst gate."""
        if self.burst is None:
            return {}
        return self.burst.spend_now(self._clock.now(), self._active(), self.traits)

    # ------------------------------------------------------------------ the fleet

    def cluster_health(self, fleet: FleetSnapshot | None = None) -> dict[str, ClusterHealth]:
        """Every declared cluster's effective health now (the poller's verdict, overruled by freshness)."""
        observed = (fleet or self.snapshots.current()).observed_by_cluster()
        now = self._clock.now()
        return {
            c: failover.effective_health(c, observed.get(c), now, self._lost_after)
            for c in sorted(self.traits)
        }

    def fleet_body(self, nodes: bool = False) -> dict[str, Any]:
        """GET /v1/fleet: each cluster as observed, totals per product beside the queued demand."""
        now = self._clock.now()
        snapshot = self.snapshots.current()
        summaries = snapshot.observed
        demand = telemetry.queued_demand(self._queued())
        clusters = []
        for s in summaries:
            view = summary_view(s, now)
            fence = snapshot.fenced.get(s.cluster) or ""
            view["drained"] = failover.is_drain(fence)  # gpufed drain (docs/migration.md)
            if view["drained"]:
                view["drainedReason"] = fence
            if nodes:
                table = self._store.get_nodes(s.cluster)
                view["nodeDetail"] = (
                    None
                    if table is None
                    else {
                        "ageSeconds": round(max(0.0, now - table[1]), 1),
                        "items": [node_view(d) for d in table[0]],
                    }
                )
            clusters.append(view)
        totals: dict[str, dict[str, int]] = {}
        for s in summaries:
            for p in s.products:
                t = totals.setdefault(p.product, {"free": 0, "allocatable": 0, "sharedFree": 0, "migFree": 0})
                t["free"] += p.free
                t["allocatable"] += p.allocatable
                t["sharedFree"] += p.shared_free
            for m in s.mig:
                t = totals.setdefault(m.product, {"free": 0, "allocatable": 0, "sharedFree": 0, "migFree": 0})
                t["migFree"] += m.free
        products = [
            {"product": name, **t, "queued": demand.get(name, 0)} for name, t in sorted(totals.items())
        ]
        products += [
            {"product": name, "free": 0, "allocatable": 0, "sharedFree": 0, "migFree": 0, "queued": units}
            for name, units in sorted(demand.items())
            if name not in totals
        ]
        return {"clusters": clusters, "products": products}

    def clusters_body(self, events: int) -> dict[str, Any]:
        """GET /v1/clusters: each declared cluster with its health, fence and latest health events;
        `recovery` is the last rebuild of the job records after Redis came back empty."""
        fleet = self.snapshots.current()
        healths = self.cluster_health(fleet)
        beats = {s.cluster: s.heartbeat for s in fleet.observed}
        items = []
        for name, t in sorted(self.traits.items()):
            h = healths[name]
            items.append(
                {
                    "name": name,
                    "tier": str(t.tier),
                    "region": t.region,
                    "labels": dict(t.labels),
                    "kueue": t.kueue_local_queue,
                    "health": str(h.health),
                    "healthReason": h.reason,
                    "healthSince": h.since,
                    "heartbeat": beats.get(name, 0.0),
                    "fenced": fleet.fenced.get(name),
                    "drained": failover.is_drain(fleet.fenced.get(name) or ""),
                    "events": [
                        {"at": e.at, "health": str(e.health), "reason": e.reason}
                        for e in (self._store.cluster_events(name, events) if events else [])
                    ],
                }
            )
        report = self._store.recovery_report()
        return {"items": items, "recovery": json.loads(report) if report else None}

    def metrics_sample(self) -> telemetry.FleetSample:
        """What /metrics computes the fleet gauges from (StoreError when Redis does not answer)."""
        return telemetry.FleetSample(
            summaries=self.snapshots.current().observed,
            jobs=tuple(self._store.list_jobs([s for s in JobState if not s.terminal])),
            now=self._clock.now(),
            event_lags=self._store.event_lags(telemetry.EVENT_LAG_BUCKETS),
        )
