"""ClusterWatcher: one member cluster's informers, its current state, health and ClusterSummaries.

Owns the per-cluster state the broker keeps between watch events: each node's summed active-pod requests
kept incrementally, NodeFacts recomputed only for the nodes an event touched and folded into a
CapacityIndex (so a ClusterSummary costs O(products), not O(nodes)); after each batch of events
on_change() is called, and on_snapshot(ClusterSnapshot, ...) where a caller still wants whole snapshots.

Health: a broker.health.machine.HealthMachine fed by the informers' call outcomes and a liveness probe
(GET /version every probe_interval_seconds: a quiet cluster still proves itself alive); summaries carry
health, reason, since and heartbeat = the last SUCCESSFUL call; transitions are logged and kept.

Memory at 100 clusters x 1,000 nodes x 5 pods: a pod is kept as (node, interned non-zero requests) while
active (adapters.watched_objects trims nodes and NRTs). Malformed nodes and pods are counted and skipped.
GPU health (adapters.gpu_health_watch, read after a probe when due) rides in the facts and the summary.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from adapters.flush_scheduler import FlushScheduler, FlushSignal
from adapters.gpu_health_watch import GpuHealthWatch
from adapters.kind_objects import KindDiscovery
from adapters.kube_informer import (
    ABSENT,
    ALL_RESOURCES,
    BAD_OBJECT,
    FORBIDDEN,
    PENDING,
    SYNCED,
    TENANCY_RESOURCES,
    UNREACHABLE,
    Informer,
    InformerStats,
    Resource,
    WatchSettings,
    is_reset,
    object_key,
)
from adapters.kube_rest import ApiStatus, KubeRest, Obj
from adapters.probe_scheduler import STARVED_LAG_SECONDS, ProbeScheduler
from adapters.watch_pacing import ConnectGate
from adapters.watched_objects import DraState, Requests, add_requests, trim_node, trim_nrt
from broker.capacity import dra, kube_objects
from broker.capacity.index import CapacityIndex
from broker.core.errors import ClusterForbidden, ClusterUnreachable
from broker.core.model import (
    ClusterSnapshot,
    ClusterSummary,
    ClusterTraits,
    Health,
    MemberNamespace,
    QueueHeadroom,
)
from broker.health.machine import (
    HealthMachine,
    HealthThresholds,
    HealthView,
    Outcome,
    Transition,
    http_cause,
)
from broker.tenancy import member_quota

log = logging.getLogger(__name__)

SnapshotCallback = Callable[[ClusterSnapshot, Health, float], None]


@dataclass
class WatcherStats:
    snapshots: int = 0
    bad_pods: int = 0
    facts_recomputed: int = 0
    last_event_at: float = 0.0  # wall time of the last applied event (for latency measurement)
    informers: dict[str, InformerStats] = field(default_factory=dict)


class ClusterWatcher:
    """One cluster's informers, its current state, and snapshots after each batch of events."""

    def __init__(
        self,
        cluster: str,
        rest: KubeRest | Path | str,
        context: str | None = None,
        *,
        on_snapshot: SnapshotCallback | None = None,
        on_change: Callable[[], None] | None = None,
        resources: Sequence[Resource] = ALL_RESOURCES,
        settings: WatchSettings | None = None,
        flush_interval_s: float = 0.05,
        clock: Callable[[], float] = time.time,
        spot: bool = False,
        health: HealthThresholds | None = None,
        on_transition: Callable[[Transition], None] | None = None,
        prober: ProbeScheduler | None = None,
        gate: ConnectGate | None = None,
        flusher: FlushScheduler | None = None,
        gpu_health: GpuHealthWatch | None = None,
    ) -> None:
        """`rest`: a KubeRest, or a kubeconfig path (+ `context`). After each batch of events (and health
        change) on_snapshot(snapshot, health, heartbeat) and on_change() run on the flusher thread;
        summary(traits) is the cheap read. `spot`: which taints count as tolerated. `health`: the health
        machine's thresholds; on_transition(t) for every change of shown health, after it is logged.
        `prober`, `gate`, `flusher`: the shard's shared ProbeScheduler, ConnectGate (None: not paced) and
        FlushScheduler (else the watcher's own). `gpu_health`: the cluster's GPU health reader, or None."""
        self.cluster = cluster
        self.rest = rest if isinstance(rest, KubeRest) else KubeRest.from_kubeconfig(cluster, rest, context)
        self._on_snapshot = on_snapshot
        self._on_change = on_change
        self._settings = settings or WatchSettings()
        self.flush_interval = flush_interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._wake = FlushSignal(self, flusher)
        self._lock = threading.Lock()
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, tuple[str, Requests]] = {}  # "namespace/name" of active pods only
        self._requests: dict[Requests, Requests] = {}  # interning: most pods ask for the same things
        self._alloc: dict[str, dict[str, int]] = {}
        self._nrts: dict[str, Obj] = {}
        self._parts = kube_objects.NodePartsCache()  # each node parsed once per version, not per pod event
        self._cqs: dict[str, Obj] = {}
        self._dra = DraState()
        # namespaces, resourcequotas, limitranges: "namespace/name" -> object (tenancy)
        self._tenancy: dict[str, dict[str, Obj]] = {r.name: {} for r in TENANCY_RESOURCES}
        self._tenancy_dirty = False
        self._tenancy_cache: tuple[str | None, str, tuple[MemberNamespace, ...]] | None = None
        self._index = CapacityIndex(cluster, spot=spot)
        self._kinds = KindDiscovery()  # workload-kind APIs and Trainer runtimes served (read after probes)
        self._bad: dict[str, str] = {}
        self._queues: tuple[QueueHeadroom, ...] = ()
        self._dirty: set[str] = set()
        self._queues_dirty = False
        self._states: dict[str, str] = {r.name: PENDING for r in resources}
        self._required = {r.name for r in resources if not r.optional}
        self._listed: set[str] = set()  # the resources listed at least once (capacity_known)
        self._rv, self._heartbeat = "", 0.0  # heartbeat: the last list, event or bookmark (observed_at)
        self._machine = HealthMachine(cluster, health or HealthThresholds(), clock())
        self._on_transition = on_transition
        self.transitions: list[Transition] = []  # the last 50, oldest first
        self._unannounced: list[Transition] = []
        self._last_health: tuple[Health, str] | None = None
        self._pending_since: float | None = None  # arrival of the first event not yet flushed
        # arrival (epoch s) of the first event of the batch handed to on_change now (event-to-Redis lag)
        self.batch_first_event_at: float | None = None
        self.stats = WatcherStats()
        self._informers = [Informer(self.rest, r, self, self._stop, self._settings, gate) for r in resources]
        self.stats.informers = {i.resource.name: i.stats for i in self._informers}
        self._flusher: threading.Thread | None = None
        self._own_prober = prober is None
        self._probes = prober or ProbeScheduler()
        self.gpu_health = gpu_health

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for inf in self._informers:
            inf.start()
        if self._wake.scheduler is None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name=f"flusher-{self.cluster}", daemon=True
            )
            self._flusher.start()
        self._probes.add(
            self, self._machine.thresholds.probe_interval_seconds, self._settings.probe_retry_interval_s
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads. A watch blocked in a read ends at its read timeout; threads are daemons."""
        self._stop.set()
        self._wake.set()
        self._probes.remove(self)
        if self._own_prober:
            self._probes.stop()
        if self._flusher is not None:
            self._flusher.join(timeout)
        self.rest.close()

    # ------------------------------------------------------------------ informer sink

    def replace(self, resource: str, items: list[Obj], rv: str) -> None:
        """A fresh list: forget what we had of this resource and take these items."""
        with self._lock:
            self._listed.add(resource)
            if resource == "nodes":
                self._dirty.update(self._nodes)
                self._nodes = {}
                for n in items:
                    self._put_node(n)
            elif resource == "pods":
                self._dirty.update(self._alloc)
                self._pods, self._alloc, self._requests = {}, {}, {}
                for p in items:
                    self._put_pod("ADDED", p)
            elif resource == "noderesourcetopologies":
                self._dirty.update(self._nrts)
                self._nrts = {}
                for t in items:
                    self._put_nrt("ADDED", t)
            elif resource == "clusterqueues":
                self._cqs = {str((q.get("metadata") or {}).get("name")): q for q in items}
                self._queues_dirty = True
            elif resource in ("resourceslices", "resourceclaims"):
                self._dirty.update(self._dra.replace(resource, items))
            elif resource in self._tenancy:
                self._tenancy[resource] = {object_key(o): o for o in items}
                self._tenancy_changed()
            self._observed(rv)
        self._wake.set()

    def apply(self, resource: str, event_type: str, obj: Obj, rv: str) -> None:
        with self._lock:
            if resource == "nodes":
                if event_type == "DELETED":
                    name = str((obj.get("metadata") or {}).get("name"))
                    self._nodes.pop(name, None)
                    self._dirty.add(name)
                else:
                    self._put_node(obj)
            elif resource == "pods":
                self._put_pod(event_type, obj)
            elif resource == "noderesourcetopologies":
                self._put_nrt(event_type, obj)
            elif resource == "clusterqueues":
                name = str((obj.get("metadata") or {}).get("name"))
                if event_type == "DELETED":
                    self._cqs.pop(name, None)
                else:
                    self._cqs[name] = obj
                self._queues_dirty = True
            elif resource in ("resourceslices", "resourceclaims"):
                self._dirty.update(self._dra.apply(resource, event_type, obj))
            elif resource in self._tenancy:
                if event_type == "DELETED":
                    self._tenancy[resource].pop(object_key(obj), None)
                else:
                    self._tenancy[resource][object_key(obj)] = obj
                self._tenancy_changed()
            self._observed(rv)
            self.stats.last_event_at = time.time()
            if self._pending_since is None:
                self._pending_since = self.stats.last_event_at
        self._wake.set()

    def touch(self, resource: str, rv: str) -> None:
        """A bookmark: the cluster is alive and we are current up to rv."""
        with self._lock:
            self._observed(rv)

    def report(
        self, resource: str, state: str, detail: str = "", cause: str = "", *, call: bool = True
    ) -> None:
        """An informer's state, and with call=True its call outcome for health: SYNCED / ABSENT (a list
        answered), UNREACHABLE / FORBIDDEN (a list or watch failed; `cause` as broker.health.machine words it).
        A watch stream that delivers or ends reports call=False: a hung server may keep old streams
        going while it answers no new request, so only requests (lists, probes) prove it alive."""
        if self._stop.is_set():
            return  # stopping closes the streams; that is not the cluster's fault
        now = self._clock()
        if state in (SYNCED, ABSENT):
            outcome = Outcome.success(now)
        else:
            what = f"list/watch {resource}: {cause}" if cause else detail
            outcome = Outcome.failure(now, what, auth=state == FORBIDDEN)
        with self._lock:
            before = self._states.get(resource)
            self._states[resource] = state
            if state == SYNCED:
                self._heartbeat = now
            if call or not outcome.ok:
                self._machine.observe(outcome)
            self._view()
        if before != state and state in (UNREACHABLE, FORBIDDEN):
            log.info("cluster %s: %s %s: %s", self.cluster, resource, state, detail)
        if before != state or self._announce():
            self._wake.set()

    def observe(self, outcome: Outcome) -> None:
        """A call outcome from outside the informers (the probe; a dispatcher's create, if wired)."""
        with self._lock:
            self._machine.observe(outcome)
            self._view()
        if self._announce():
            self._wake.set()

    def _announce(self) -> bool:
        """Log the transitions seen since the last call and hand them to on_transition (outside the lock).
        True if there were any."""
        with self._lock:
            todo, self._unannounced = self._unannounced, []
        for t in todo:
            worse = t.after in (Health.DEGRADED, Health.UNREACHABLE, Health.FORBIDDEN)
            log.log(logging.WARNING if worse else logging.INFO, "%s", t)
            if self._on_transition is not None:
                try:
                    self._on_transition(t)
                except Exception:
                    log.exception("cluster %s: the transition callback failed", self.cluster)
        return bool(todo)

    async def probe(self, lag: Callable[[], float] | None = None) -> Outcome:
        """One liveness probe (GET /version, short deadline, on the watch loop), fed to the health machine.
        `lag` (the shard's LagMeter.lag) is taken off the measured latency: a starved poller is not a slow
        member."""
        timeout = self._settings.probe_timeout
        start = time.monotonic()
        try:
            async for attempt in AsyncRetrying(  # a reset pooled connection is retried once at once
                retry=retry_if_exception(is_reset),
                wait=wait_random_exponential(multiplier=0.05, max=0.2),
                stop=stop_after_attempt(2),
                reraise=True,
            ):
                with attempt:
                    start = time.monotonic()
                    await self.rest.aio.probe(timeout)
            latency = time.monotonic() - start
            outcome = Outcome.success(self._clock(), latency=max(0.0, latency - (lag() if lag else 0.0)))
        except ClusterForbidden as e:
            outcome = Outcome.failure(self._clock(), e.cause or str(e), auth=True)
        except ClusterUnreachable as e:
            outcome = Outcome.failure(self._clock(), e.cause or str(e))
        except ApiStatus as e:
            outcome = Outcome.failure(self._clock(), http_cause(e.code, e.reason))
        except Exception as e:  # a probe must never end its task
            outcome = Outcome.failure(self._clock(), type(e).__name__)
        # A timeout while the shard itself runs late (lag >= STARVED_LAG_SECONDS) proves nothing about the
        # member: it is not counted (no success either, so a dead member is still lost in time).
        starved = lag is not None and outcome.cause.startswith("timeout") and lag() >= STARVED_LAG_SECONDS
        if not self._stop.is_set() and not starved:
            self.observe(outcome)
        # which workload kinds it serves (discovery, at most once a minute, after a successful probe), on a
        # worker thread: its reads are the synchronous client's
        due = outcome.ok and not self._stop.is_set() and self._kinds.due()
        if due and await asyncio.to_thread(self._kinds.refresh, self.rest):
            self._tenancy_dirty = True  # publish a summary with what it serves now
            self._wake.set()
        if outcome.ok and self.gpu_health is not None and self.gpu_health.due() and not self._stop.is_set():
            with self._lock:  # the nodes as watched (conditions, taints) and their physical GPUs
                nodes, gpus = dict(self._nodes), {n.name: n.gpu_count for n in self._index.nodes()}
            seen = self.gpu_health.view()
            changed = await asyncio.to_thread(self.gpu_health.refresh, self.rest, nodes, gpus)
            # publish on any view change, not only a node's: `observed` turning true (a member's Prometheus
            # answered its first DCGM series) is what lets status sync wait for a GPU death's fault
            moved = bool(changed) or self.gpu_health.view() != seen
            with self._lock:  # recompute those nodes; publish even when no capacity moved (a view change)
                self._dirty, self._tenancy_dirty = self._dirty | changed, self._tenancy_dirty or moved
            if moved:
                self._wake.set()
        return outcome

    # ------------------------------------------------------------------ state (under the lock)

    def _observed(self, rv: str) -> None:
        self._heartbeat = self._clock()
        if rv:
            self._rv = rv

    def _put_node(self, node: Obj) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            return  # an unnamed object can't be tracked (the API server never sends one)
        self._nodes[name] = trim_node(node)
        self._dirty.add(name)

    def _put_pod(self, event_type: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        old = self._pods.pop(key, None)
        if old is not None:
            self._unalloc(old[0], old[1])
        if event_type == "DELETED" or not kube_objects.pod_is_active(pod):
            return
        try:
            raw = tuple(sorted((k, v) for k, v in kube_objects.pod_requests(pod).items() if v))
        except BAD_OBJECT as e:
            self.stats.bad_pods += 1
            log.debug("cluster %s: pod %s skipped: %s", self.cluster, key, e)
            return
        req = self._requests.setdefault(raw, raw)
        node = str(pod["spec"]["nodeName"])
        self._pods[key] = (node, req)
        add_requests(self._alloc.setdefault(node, {}), req, 1)
        self._dirty.add(node)

    def _unalloc(self, node: str, req: Requests) -> None:
        alloc = self._alloc.get(node)
        if alloc is not None:
            add_requests(alloc, req, -1)
            if not alloc:
                del self._alloc[node]
        self._dirty.add(node)

    def _put_nrt(self, event_type: str, nrt: Obj) -> None:
        name = str((nrt.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            self._nrts.pop(name, None)
        else:
            self._nrts[name] = trim_nrt(nrt)
        self._dirty.add(name)

    def _refresh(self) -> None:
        for name in self._dirty:
            node = self._nodes.get(name)
            if node is None:
                self._index.remove(name)
                self._bad.pop(name, None)
                self._parts.forget(name)
                continue
            try:
                facts = self._parts.facts(name, node, self._alloc.get(name, {}), self._nrts.get(name))
                slices = self._dra.slices_of(name)
                if slices:
                    facts = dra.merge(facts, slices, self._dra.used)
                facts = self.gpu_health.overlay(facts) if self.gpu_health is not None else facts
                self._index.upsert(facts)
                self._bad.pop(name, None)
            except BAD_OBJECT as e:
                self._index.mark_bad(name)
                if self._bad.get(name) != str(e):
                    log.warning("cluster %s: node %s skipped: %s", self.cluster, name, e)
                self._bad[name] = str(e)
            self.stats.facts_recomputed += 1
        self._dirty.clear()
        if self._queues_dirty:
            queues: list[QueueHeadroom] = []
            for name in sorted(self._cqs):
                try:
                    queues.extend(kube_objects.queue_headroom(self._cqs[name]))
                except BAD_OBJECT as e:
                    log.warning("cluster %s: clusterqueue %s skipped: %s", self.cluster, name, e)
            self._queues = tuple(queues)
            self._queues_dirty = False

    # ------------------------------------------------------------------ outputs

    @property
    def health(self) -> Health:
        return self.health_view().health

    def health_view(self) -> HealthView:
        """(health, reason, since, last_success) now."""
        with self._lock:
            view = self._view()
        self._announce()
        return view

    def _view(self) -> HealthView:
        transition = self._machine.evaluate(self._clock())
        if transition is not None:  # announced (logged, handed on) by _announce outside the lock
            self.transitions.append(transition)
            del self.transitions[:-50]
            self._unannounced.append(transition)
        view = self._machine.view
        if view.health == Health.HEALTHY and any(self._states[r] == PENDING for r in self._required):
            # Alive, but a required informer has not listed yet: its capacity is not known.
            return HealthView(Health.UNKNOWN, "syncing", view.since, view.last_success)
        return view

    @property
    def capacity_known(self) -> bool:
        """Every required informer has listed once and every optional one has answered (listed, absent or
        refused): before that a per-node table would miss nodes, or their NUMA zones or DRA devices."""
        with self._lock:
            return self._capacity_known()

    def _capacity_known(self) -> bool:
        return self._required <= self._listed and PENDING not in self._states.values()

    @property
    def last_success(self) -> float:
        """Epoch seconds of the last successful call (probe, list, watch): the heartbeat."""
        with self._lock:
            return self._machine.last_success

    def snapshot(self) -> ClusterSnapshot:
        """The cluster as last observed (NodeFacts recomputed for the nodes touched since the last call)."""
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> ClusterSnapshot:
        self._refresh()
        return ClusterSnapshot(
            cluster=self.cluster,
            nodes=self._index.nodes(),
            queues=self._queues,
            observed_at=self._heartbeat,
            resource_version=self._rv,
            bad_nodes=self._index.bad_nodes,
        )

    def _tenancy_changed(self) -> None:
        self._tenancy_dirty = True
        self._tenancy_cache = None

    def _namespaces(self, traits: ClusterTraits) -> tuple[bool, tuple[MemberNamespace, ...]]:
        """(observed, the cluster's tenant namespaces with their quotas and limits), under the lock.
        Observed once the namespaces list answered; parsed again only after a change."""
        if self._states.get("namespaces") != SYNCED:
            return False, ()
        key = (traits.tenant_namespace, traits.namespace)
        if self._tenancy_cache is not None and self._tenancy_cache[:2] == key:
            return True, self._tenancy_cache[2]
        wanted = member_quota.tenant_namespace_matcher(traits)

        def bad(name: str, why: str) -> None:
            log.warning("cluster %s: %s skipped: %s", self.cluster, name, why)

        found = member_quota.member_namespaces(
            self._tenancy["namespaces"].values(),
            self._tenancy["resourcequotas"].values(),
            self._tenancy["limitranges"].values(),
            wanted,
            bad,
        )
        self._tenancy_cache = (*key, found)
        return True, found

    def summary(self, traits: ClusterTraits) -> ClusterSummary:
        """The cluster's ClusterSummary now (health and heartbeat included), from the incremental index:
        O(products x histogram width) plus the NodeFacts of nodes touched since the last refresh.
        Equal to capacity_rollup.summarize(self.snapshot(), traits, self.health, self.last_success)."""
        with self._lock:
            self._refresh()
            view = self._view()
            summary = self._index.summary(traits, view.health, view.last_success, self._queues)
            observed, namespaces = self._namespaces(traits)
        self._announce()
        return dataclasses.replace(
            summary,
            health_reason=view.reason,
            health_since=view.since,
            namespaces=namespaces,
            namespaces_observed=observed,
            workload_apis=self._kinds.apis,
            training_runtimes=self._kinds.runtimes,
            workload_apis_observed=self._kinds.observed,
            gpu_health=self.gpu_health.view() if self.gpu_health is not None else summary.gpu_health,
        )

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=30.0)  # stop() sets _wake too; a timeout alone does nothing
            if self._stop.is_set():
                return
            if not self._wake.is_set():
                continue
            self._stop.wait(self.flush_interval)  # let a burst of events land in one batch
            self.flush_due()

    def flush_due(self) -> None:
        """Fold the events that arrived into the index and hand the snapshot to the callbacks (on the
        watcher's own thread, or on the shard's FlushScheduler once `flush_interval` has passed)."""
        if self._stop.is_set() or not self._wake.is_set():
            return
        self._wake.clear()
        with self._lock:
            view = self._view()
            health = view.health
            ready = all(self._states[r] not in (PENDING,) for r in self._required)
            if not ready and health not in (Health.UNREACHABLE, Health.FORBIDDEN):
                return
            key = (health, view.reason)
            # events already folded into the index by another reader (a node table) still publish
            if (
                not self._dirty
                and self._pending_since is None
                and not self._queues_dirty
                and not self._tenancy_dirty
                and key == self._last_health
            ):
                return
            self._tenancy_dirty = False
            if self._on_snapshot is not None:
                snap: ClusterSnapshot | None = self._snapshot()
            else:
                self._refresh()  # fold the batch into the index here, off the publisher's path
                snap = None
            heartbeat = view.last_success
            self._last_health = key
            self.batch_first_event_at, self._pending_since = self._pending_since, None
        self._announce()
        try:
            if self._on_snapshot is not None and snap is not None:
                self._on_snapshot(snap, health, heartbeat)
            if self._on_change is not None:
                self._on_change()
            self.stats.snapshots += 1
        except Exception:
            log.exception("cluster %s: snapshot callback failed; the next batch retries", self.cluster)
            with self._lock:
                self._last_health = None
            self._wake.set()
