"""What every reconciler of BrokerService shares: its state, the one state writer, the shared helpers.

Owns ServiceSettings and ControllerBase: the attributes BrokerService.__init__ sets (ports, the FleetCache,
the leader's job records, the work queue, the StateWriter) declared once, and the helpers more than one
reconciler uses: a job's failover step (_fail_over), deleting a Job, the quota charges of live
reservations, cluster health from the FleetCache, the declared clusters' hot swap (set_traits). Every
job write goes through `self.writer` (broker.controller.state_writer).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from broker.burst.gate import BurstGate
from broker.cache.fleet_cache import FleetCache
from broker.controller import faults
from broker.controller.dispatch import Dispatcher
from broker.controller.job_records import PLACED_STATES, JobRecords
from broker.controller.state_writer import StateWriter, event_of
from broker.controller.work_queue import WorkQueue
from broker.core.errors import (
    ClusterError,
    Conflict,
)
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobEvent,
    JobRecord,
    JobState,
)
from broker.core.ports import Clock, ClusterGateway, StateStore, WorkloadWatch
from broker.health import failover
from broker.health.failover import ClusterHealth
from broker.queue import queueing
from broker.scheduler import placement, preemption
from broker.telemetry.log_throttle import Throttle
from broker.tenancy import member_quota
from broker.workload import lifecycle, member_trouble

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceSettings:
    reservation_ttl_seconds: float = 120.0
    priorities: Mapping[str, int] | None = None  # priority class name -> value
    cluster_lost_seconds: float = 10.0  # unreachable this long (or credentials rejected this long): lost
    # most of a large fleet lost at once: failover pauses (broker.health.failover.mass_loss)
    mass_loss: failover.MassLossPolicy = field(default_factory=failover.MassLossPolicy)
    federation: str | None = None  # the store prefix, written on every Job (broker.ha.recovery adopts by it)
    queue: queueing.QueuePolicy | None = None  # priorities, fair-share weights, quotas (docs/tenancy.md)
    # who may preempt lower priorities, and the storm limits (broker.scheduler.preemption); None: nobody preempts
    preemption: preemption.PreemptionPolicy | None = None
    # a finished Job is deleted from its member this long after it ended (ttlSecondsAfterFinished)
    finished_job_ttl_seconds: int | None = 3600
    # what is done about trouble inside a member (memberPendingSeconds, imagePullFailSeconds,
    # memberAvoidSeconds; broker.workload.member_trouble, docs/health.md)
    trouble_policy: member_trouble.TroublePolicy = field(default_factory=member_trouble.TroublePolicy)

    def queue_policy(self) -> queueing.QueuePolicy:
        """The global queue's policy (`queue`, else just `priorities`)."""
        if self.queue is not None:
            return self.queue
        return queueing.QueuePolicy(priorities=dict(self.priorities or {}))


class ControllerBase:
    """The state BrokerService.__init__ sets, declared for its reconcilers, and their shared helpers."""

    store: StateStore
    gateway: ClusterGateway
    clock: Clock
    traits: dict[str, ClusterTraits]
    policy: placement.PlacementPolicy
    settings: ServiceSettings
    dispatcher: Dispatcher
    placer_id: str
    cache: FleetCache
    burst: BurstGate | None
    records: JobRecords
    writer: StateWriter
    work: WorkQueue
    evaluations: int
    _pending_traits: dict[str, ClusterTraits] | None
    _pending_lock: threading.Lock
    _parked: dict[str, str]
    _no_fit: dict[str, tuple[int, str, float]]
    _pass_fences: str  # this pass's fenced clusters and why (Scheduling._fences_key)
    _health_seen: dict[str, Health]
    shard_of: Callable[[str], str]
    _blind: dict[str, list[str]]
    _blind_everywhere: bool
    _mass_lost: bool
    _fenced: set[str]
    _fence_reasons: dict[str, str]  # fenced cluster -> why (a drain's reason names the operator's)
    _sweep_failures: Throttle
    _next_loss_at: float | None
    _settling: dict[tuple[str, int], tuple[str, int, float]]  # (cluster, summary writes seen, when)
    _settling_lock: threading.Lock
    _quota_charges: dict[str, tuple[str, str, Mapping[str, int]]]
    _preempted_for: dict[str, float]
    _preemptions: list[tuple[float, str, int]]
    _unreadable: set[str]
    _tenants_seen: set[str]
    _watch: WorkloadWatch | None
    _next_resync: float
    _held_back: dict[str, set[str]]  # cluster -> dirty jobs not read while it is unavailable or fenced
    _cache_observed: bool

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

    def _delete_workload(self, cluster: str, name: str, record: JobRecord) -> None:
        """Remove a Job the broker no longer wants; a failure is logged and recorded, never raised."""
        namespace = self._namespace(cluster, record.request.tenant)
        try:
            self.gateway.delete_workload(cluster, namespace, name)
        except ClusterError as exc:
            log.warning("cannot delete %s on %s for %s: %s", name, cluster, record.id, exc)
            self._event(record, f"Job {name} could not be deleted from {cluster}: {exc}")

    def _placed_jobs(self) -> list[JobRecord]:
        if self.records.built:
            return self.records.in_states(PLACED_STATES)
        return self.store.list_jobs(list(PLACED_STATES))

    def _fresh_cache(self, reuse: bool = False) -> list[str]:
        """Read what moved in the store into the FleetCache; with reuse, not again when observe_clusters
        read it since the last reuse (the same pass). Returns the clusters whose summary moved."""
        if reuse and self._cache_observed:
            self._cache_observed = False
            return []
        return self.cache.refresh()

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

    def cluster_health(self) -> dict[str, ClusterHealth]:
        """Every declared cluster's effective health now (the poller's verdict, overruled by freshness)."""
        return self._cluster_health({s.cluster: s for s in self.store.observed_summaries()})

    def _cluster_health(self, summaries: dict[str, ClusterSummary]) -> dict[str, ClusterHealth]:
        now = self.clock.now()
        return {
            c: failover.effective_health(c, summaries.get(c), now, self.settings.cluster_lost_seconds)
            for c in sorted(self.traits)
        }

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
        them would only time out (from the FleetCache: only moved summaries are read)."""
        self._fresh_cache(reuse=True)  # observe_clusters read them at the start of this pass
        healths = self._cluster_health({s.cluster: s for s in self.cache.observed()})
        return {c for c, h in healths.items() if failover.lost_health(h)}

    def _transition(
        self,
        record: JobRecord,
        state: JobState,
        reason: str,
        expected: JobState | None = None,
        expected_attempt: int | None = None,
        at: float | None = None,
    ) -> JobRecord:
        return self.writer.transition(record, state, reason, expected, expected_attempt, at)

    def _save(self, record: JobRecord) -> JobRecord:
        return self.writer.save(record)

    @staticmethod
    def _event_of(record: JobRecord, reason: str) -> JobEvent:
        return event_of(record, reason)

    def _event(self, record: JobRecord, reason: str) -> None:
        self.writer.event(record, reason)
