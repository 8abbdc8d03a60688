"""BrokerService: the broker's use cases over its ports, a thin facade over the controller's reconcilers.

The API's use cases live here: submit (validation, the record and its first event; the API's group commit
stores many at once), get, jobs, events, cancel (CANCELLED by compare-and-set first, then the Job is
deleted; a dispatch that created the Job meanwhile sees CANCELLED and deletes it). The read views (fleet,
explain, the queue's positions, wait predictions, spend) are broker.api.views'. The control loop's steps are the reconcilers'
(broker/controller: observe_clusters in clusters, sync_status in status_sync, enforce_budgets in budgets,
schedule_once in scheduling with preempting and dispatching, burst_back in bursting_back, sweep_orphans in sweeping), over one state
writer (broker.controller.state_writer) and the leader's in-memory job records (job_records). Every
decision is delegated to the pure core (placement, hints, lifecycle, queueing, preemption).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from broker import telemetry
from broker.burst.gate import BurstGate
from broker.cache.fleet_cache import FleetCache
from broker.controller import faults
from broker.controller.base import ServiceSettings
from broker.controller.batching import Batching
from broker.controller.budgets import Budgets
from broker.controller.bursting_back import BurstBackState, BurstingBack
from broker.controller.clusters import ClusterWatch
from broker.controller.dispatch import Dispatcher, InlineDispatcher
from broker.controller.dispatching import DISPATCH_BACKOFF_MAX_SECONDS
from broker.controller.job_records import JobRecords
from broker.controller.member_troubles import TroubleMemory
from broker.controller.scheduling import Scheduling
from broker.controller.state_writer import StateWriter
from broker.controller.status_sync import StatusSync
from broker.controller.work_queue import WorkQueue
from broker.core import catalog
from broker.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    StoreError,
)
from broker.core.model import (
    ClusterTraits,
    Health,
    JobEvent,
    JobRecord,
    JobRequest,
    JobState,
)
from broker.core.ports import Clock, ClusterGateway, StateStore, WorkloadWatch
from broker.health import failover
from broker.scheduler import placement
from broker.telemetry.log_throttle import Throttle
from broker.workload import annotation_budget

__all__ = ["DISPATCH_BACKOFF_MAX_SECONDS", "BrokerService", "ServiceSettings", "new_job_id"]

log = logging.getLogger(__name__)

# How often cancel() re-reads a job that changed state under it before giving up.
_CANCEL_ATTEMPTS = 5
# The product names the fleet shows, for submit's validation: read again at most this often.
_KNOWN_PRODUCTS_TTL_SECONDS = 5.0


# Job ids: 48 random bits, as uuid4().hex[:12] had, from a generator seeded once per process (and again
# in a forked child) rather than os.urandom per submit: a system call on the API's event loop hands the
# GIL to the control loop's thread, and getting it back costs up to a switch interval per request.
_ids = random.Random(int.from_bytes(os.urandom(16), "big"))
os.register_at_fork(after_in_child=lambda: _ids.seed(int.from_bytes(os.urandom(16), "big")))


def new_job_id() -> str:
    return f"j{_ids.getrandbits(48):012x}"


class BrokerService(Scheduling, StatusSync, ClusterWatch, Budgets, BurstingBack, Batching):
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
        # job id -> (cache generation, fences, time) of its NoFit
        self._no_fit: dict[str, tuple[int, str, float]] = {}
        self._pass_fences = ""
        self._known_products: frozenset[str] = frozenset()
        self._known_products_at = float("-inf")
        self.evaluations = 0  # jobs decided by the scheduling passes (what parking saves)
        self._health_seen: dict[str, Health] = {}
        # which poller shard observes a cluster (the fleet's ring, set by the composition root); one
        # shard for the whole fleet until told: failover.blind_shards
        self.shard_of: Callable[[str], str] = failover.one_shard
        self._blind: dict[str, list[str]] = {}  # shards that wrote nothing at the last observe_clusters
        self._blind_everywhere = False  # ... and they were every shard (said once per spell)
        self._mass_lost = False  # most of the fleet lost at the last observe_clusters (failover paused)
        self._fenced: set[str] = set()  # clusters not offered to placement until swept (observe_clusters)
        self._fence_reasons: dict[str, str] = {}  # the fenced clusters' reasons, as the store has them
        # a fenced cluster whose sweep fails stays fenced: one line per cluster a minute, not a traceback
        self._sweep_failures = Throttle(logging.getLogger("broker.controller.clusters"))
        self._next_loss_at: float | None = None  # the earliest loss deadline of a failing cluster
        # (job id, attempt) -> (cluster, its summary's writes when the job's pods were seen ready): the
        # reservation is released once a later write (which counts those pods) is in the store. Written
        # by the per-cluster sync workers, read by the loop: under its lock.
        self._settling: dict[tuple[str, int], tuple[str, int, float]] = {}
        self._settling_lock = threading.Lock()
        # Wait-or-burst and spend (docs/burst.md); None: a job that allows burst bursts when nothing fits.
        self.burst = burst
        # job id -> (cluster, tenant namespace, quota usage) of placements not yet counted by the cluster
        self._quota_charges: dict[str, tuple[str, str, Mapping[str, int]]] = {}
        self._preempted_for: dict[str, float] = {}  # preemptor job id -> when its victims were evicted
        self._preemptions: list[tuple[float, str, int]] = []  # (when, tenant, victims): the storm limits
        self._unreadable: set[str] = set()  # clusters whose last Job read failed (said once, until one works)
        self._tenants_seen: set[str] = set()  # tenants of jobs seen queued or placed (the sweep's namespaces)
        # The leader's job records in memory, the one writer of job state, and what changed since the
        # last pass (broker.controller): a pass reads from the store only what changed.
        self.records = JobRecords(store)
        self.writer = StateWriter(store, clock, self.records)
        self.work = WorkQueue()
        self._watch: WorkloadWatch | None = None  # set by watch_changes(): statuses come by event
        self._next_resync = float("-inf")
        self._held_back: dict[str, set[str]] = {}
        self._troubles = TroubleMemory()  # member trouble: when first seen, when to look again
        self._swept = {}  # cluster -> what its last clean sweep saw (broker.controller.sweeping)
        self._sweeping = {}  # cluster -> the lock one sweep of it holds
        self._cache_observed = False  # observe_clusters refreshed the FleetCache (sync_status reuses it)
        self.burst_back_state = BurstBackState()  # burst-back's memory between passes (bursting_back)
        self._gpu_breakers = {}  # cluster -> its GPU circuit breaker open at the last pass (gpu_faults)
        self._gpu_held = {}  # (job id, attempt) -> when its failure was held for a GPU fault (gpu_faults)

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
        if stored.id == record.id:
            self.records.put(stored)  # this service's own submit (its records are built once it leads)
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
        record = JobRecord(
            id=job_id,
            request=request,
            state=JobState.QUEUED,
            created_at=now,
            updated_at=now,
            reason="waiting for placement",
            idempotency_key=idempotency_key,
            trace_parent=telemetry.root_traceparent("gpufed.job.submit", **{"gpufed.job_id": job_id}),
        )
        record = self.prepare_batch(record)  # dependsOn resolved; PENDING while it waits (docs/batch.md)
        return record, self._event_of(record, "submitted")

    def _canonical_products(self, request: JobRequest) -> JobRequest:
        """Catalog names in their canonical spelling; a product neither in the catalog nor seen in any
        cluster (unknown products keep their raw GFD name) is refused, as is a MIG profile no product has."""
        products: list[str] = []
        for i, name in enumerate(request.gpu_products):
            known = catalog.lookup(name)  # a name, a GFD label value or an unambiguous short name
            if known is not None:
                products.append(known.name)
            elif name in self._fleet_products(refresh_if_missing=name):
                products.append(name)
            else:
                raise InvalidRequest(f"gpuProducts[{i}]", catalog.unknown_product(name, self._known_products))
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

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        """CANCELLED first (compare-and-set on the state read), then the Job is deleted from its cluster.

        In that order a dispatch racing with the cancel either loses its own compare-and-set or sees
        CANCELLED after its create and deletes what it created (see _dispatch); a job that finished
        meanwhile stays finished."""
        record = self.get(job_id)
        for _ in range(_CANCEL_ATTEMPTS):
            if record.state.terminal:
                raise Conflict(f"job {job_id} is already {record.state}")
            try:
                cancelled = self._transition(record, JobState.CANCELLED, reason, record.state)
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

    # The views (fleet, explain, queue positions, spend) are broker.api.views', over the published
    # fleet snapshot (broker.cache.fleet_snapshot).
