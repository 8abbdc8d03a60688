"""Informers: keep one member cluster's capacity fresh by list + watch, and turn it into ClusterSnapshots.

Owns the watch protocol and the per-cluster state the broker keeps between events:
    Informer        one resource of one cluster (nodes, pods, noderesourcetopologies, Kueue clusterqueues,
                    DRA resourceslices and resourceclaims; namespaces, resourcequotas and limitranges for
                    the tenant namespaces' quotas and limits, summary.namespaces):
                    a paginated list, then a watch from the list's resourceVersion with bookmarks, server
                    timeoutSeconds and a client read timeout; relist on 410 Gone; lists retry transient
                    failures (a reset connection, 5xx, 429) with tenacity's jittered backoff, and a watch
                    cut by a reset resumes from its last resourceVersion after a short jittered pause
                    without telling health (one reset is not a fault); a missing CRD (404) is "absent"
    ClusterWatcher  a cluster's current objects, each node's summed active-pod requests kept incrementally,
                    NodeFacts recomputed only for the nodes an event touched and folded into a
                    CapacityIndex (so a ClusterSummary costs O(products), not O(nodes)); after each batch
                    of events on_change() is called, and on_snapshot(ClusterSnapshot, ...) where a caller
                    still wants whole snapshots
    DraState        the gpu.nvidia.com ResourceSlices by node and the devices allocated claims hold; a node
                    with GPU slices gets its GPU facts from them (broker/dra.merge)
    health          each ClusterWatcher owns a broker.health.HealthMachine fed by its informers' call
                    outcomes (list/watch requests) and by a liveness probe (GET /version, short deadline,
                    every probe_interval_s) so that a quiet cluster still proves itself alive; summaries
                    carry its health, health_reason, health_since, and heartbeat = the last SUCCESSFUL call;
                    every transition is logged (WARNING when worse, INFO when better) with its cause and
                    kept in `transitions`

Memory at 100 clusters x 1,000 nodes x 5 pods: a pod is kept as (node name, interned tuple of its non-zero
effective requests) and only while it is active; nodes and NodeResourceTopologies are trimmed to the
fields capacity reads.

Each informer runs in its own thread; a failing cluster only fails its own threads. Malformed nodes are
logged once, counted (snapshot.bad_nodes) and skipped; malformed pods are counted and skipped.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from adapters.kube_rest import ApiStatus, KubeRest, Obj, is_transient
from broker import capacity, dra, member_quota
from broker.capacity_index import CapacityIndex
from broker.errors import ClusterForbidden, ClusterUnreachable, MalformedObject
from broker.health import (
    CONNECTION_RESET,
    HealthMachine,
    HealthThresholds,
    HealthView,
    Outcome,
    Transition,
    http_cause,
)
from broker.model import (
    TENANT_PLACEHOLDER,
    ClusterSnapshot,
    ClusterSummary,
    ClusterTraits,
    Health,
    MemberNamespace,
    QueueHeadroom,
)

log = logging.getLogger(__name__)

# Informer states
PENDING, SYNCED, UNREACHABLE, FORBIDDEN, ABSENT = "pending", "synced", "unreachable", "forbidden", "absent"
_BAD_OBJECT = (MalformedObject, ValueError, TypeError, KeyError, AttributeError)


@dataclass(frozen=True)
class Resource:
    """A watched collection: its name and REST paths (alternatives, newest API version first)."""

    name: str
    paths: tuple[str, ...]
    optional: bool = False  # a missing CRD is not an error
    selector: tuple[tuple[str, str], ...] = ()  # query parameters of list and watch, e.g. a labelSelector


NODES = Resource("nodes", ("/api/v1/nodes",))
PODS = Resource("pods", ("/api/v1/pods",))
NODE_TOPOLOGIES = Resource(
    "noderesourcetopologies", ("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies",), optional=True
)
CLUSTER_QUEUES = Resource(
    "clusterqueues",
    ("/apis/kueue.x-k8s.io/v1beta2/clusterqueues", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues"),
    optional=True,
)
# DRA (resource.k8s.io/v1): GPUs published by the NVIDIA DRA driver, and the claims that hold them.
RESOURCE_SLICES = Resource("resourceslices", ("/apis/resource.k8s.io/v1/resourceslices",), optional=True)
RESOURCE_CLAIMS = Resource("resourceclaims", ("/apis/resource.k8s.io/v1/resourceclaims",), optional=True)
# Tenancy (docs/tenancy.md): which namespaces exist, and their quotas and limits (broker.member_quota).
NAMESPACES = Resource("namespaces", ("/api/v1/namespaces",), optional=True)
RESOURCE_QUOTAS = Resource("resourcequotas", ("/api/v1/resourcequotas",), optional=True)
LIMIT_RANGES = Resource("limitranges", ("/api/v1/limitranges",), optional=True)
TENANCY_RESOURCES = (NAMESPACES, RESOURCE_QUOTAS, LIMIT_RANGES)
ALL_RESOURCES = (
    NODES,
    PODS,
    NODE_TOPOLOGIES,
    CLUSTER_QUEUES,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    *TENANCY_RESOURCES,
)


@dataclass(frozen=True)
class WatchSettings:
    """Timeouts and backoff of list/watch. Server timeoutSeconds bounds a watch; the read timeout catches
    a cluster that hangs without closing the connection."""

    # The end of each watch is the heartbeat of a quiet cluster (real API servers bookmark about once a
    # minute): keep it well inside the placer's staleness limit (settings.staleAfterSeconds, default 30).
    watch_timeout_s: int = 20
    read_slack_s: float = 15.0
    list_timeout: tuple[float, float] = (3.0, 15.0)
    page_size: int = 500
    backoff_base_s: float = 0.25
    backoff_max_s: float = 10.0
    absent_recheck_s: float = 60.0
    list_attempts: int = 3
    # Consecutive transient failures (reset connections) of one informer that are retried quietly before
    # health hears of them.
    quiet_retries: int = 2
    # The liveness probe: a quiet cluster's watches prove nothing for up to watch_timeout_s, and health
    # calls a cluster lost after clusterLostSeconds (10) without a successful call.
    probe_interval_s: float = 2.0
    probe_timeout: tuple[float, float] = (1.5, 2.0)
    # In doubt, look again soon: after a failed probe the next comes this much later, so a cluster that
    # answers half its calls is never "lost" by a run of bad luck (10 s of failures in a row at 50%
    # errors is 40 coin flips), while a dead one costs a few cheap refused connections a second.
    probe_retry_interval_s: float = 0.25


class InformerSink(Protocol):
    """Where an Informer delivers what it lists and watches (ClusterWatcher, adapters.job_informer)."""

    def replace(self, resource: str, items: list[Obj], rv: str) -> None: ...

    def apply(self, resource: str, event_type: str, obj: Obj, rv: str) -> None: ...

    def touch(self, resource: str, rv: str) -> None: ...

    def report(
        self, resource: str, state: str, detail: str = "", cause: str = "", *, call: bool = True
    ) -> None: ...


@dataclass
class InformerStats:
    lists: int = 0
    relists_410: int = 0
    events: int = 0
    bookmarks: int = 0
    errors: int = 0
    quiet_retries: int = 0  # transient failures retried without telling health


class Informer:
    """List + watch one resource of one cluster into a sink (a ClusterWatcher, a job cache)."""

    def __init__(
        self,
        rest: KubeRest,
        resource: Resource,
        sink: InformerSink,
        stop: threading.Event,
        settings: WatchSettings,
    ) -> None:
        self.rest = rest
        self.resource = resource
        self.sink = sink
        self.stop = stop
        self.settings = settings
        self.stats = InformerStats()
        self.path = resource.paths[0]
        self._rv = ""  # the resourceVersion the informer is current at ("" = list first)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run, name=f"informer-{self.rest.cluster}-{self.resource.name}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _list(self) -> tuple[list[Obj], str]:
        """List, trying each API version of the resource; ApiStatus(404) when none is served."""
        last: ApiStatus | None = None
        for path in self.resource.paths:
            try:
                for attempt in Retrying(
                    retry=retry_if_exception(is_transient),
                    wait=wait_random_exponential(multiplier=self.settings.backoff_base_s, max=2.0),
                    stop=stop_after_attempt(self.settings.list_attempts),
                    reraise=True,
                ):
                    with attempt:
                        items, rv = self.rest.list_pages(
                            path,
                            self.settings.page_size,
                            timeout=self.settings.list_timeout,
                            selector=self.resource.selector,
                        )
                self.path = path
                return items, rv
            except ApiStatus as e:
                if e.code != 404:
                    raise
                last = e
        assert last is not None
        raise last

    def run(self) -> None:
        self._rv = ""
        failures = 0
        transient = 0  # consecutive transient failures not (yet) reported to health
        s = self.settings
        while not self.stop.is_set():
            attempt_started = time.monotonic()
            try:
                if not self._rv:
                    items, rv = self._list()
                    self.stats.lists += 1
                    self.sink.replace(self.resource.name, items, rv)
                    del items  # the whole list (every pod in full) must not live as long as the watch
                    self.sink.report(self.resource.name, SYNCED)
                    self._rv = rv
                self._rv = self._watch(self._rv)
                failures = transient = 0
            except ApiStatus as e:
                if e.code == 410:
                    self.stats.relists_410 += 1
                    self._rv = ""
                    continue
                if e.code == 404 and self.resource.optional:
                    self.sink.replace(self.resource.name, [], "")
                    self.sink.report(self.resource.name, ABSENT)
                    self._rv = ""
                    self.stop.wait(s.absent_recheck_s)
                    continue
                failures += 1
                self.stats.errors += 1
                self.sink.report(self.resource.name, UNREACHABLE, str(e), http_cause(e.code, e.reason))
            except ClusterForbidden as e:
                failures += 1
                self.stats.errors += 1
                self.sink.report(self.resource.name, FORBIDDEN, str(e), e.cause)
            except ClusterUnreachable as e:
                self.stats.errors += 1
                if time.monotonic() - attempt_started > 1.0:
                    transient = 0  # a stream that ran for a while and then broke: a new incident
                if is_transient(e) and transient < s.quiet_retries:
                    # A reset connection (or one 5xx): resume at once from the last resourceVersion,
                    # after a short jittered pause; health hears only if it keeps happening.
                    transient += 1
                    self.stats.quiet_retries += 1
                    self.stop.wait(random.uniform(0.0, s.backoff_base_s))
                    continue
                failures += 1
                self.sink.report(self.resource.name, UNREACHABLE, str(e), e.cause)
            except Exception as e:  # never let one resource's surprise kill the thread
                failures += 1
                self.stats.errors += 1
                log.exception("cluster %s: %s informer failed", self.rest.cluster, self.resource.name)
                self.sink.report(
                    self.resource.name, UNREACHABLE, f"{type(e).__name__}: {e}", type(e).__name__
                )
            if failures:
                delay = min(s.backoff_max_s, s.backoff_base_s * 2 ** min(failures, 10))
                self.stop.wait(delay * random.uniform(0.5, 1.0))

    def _watch(self, rv: str) -> str:
        """One watch request; returns the resourceVersion to resume from. Raises ApiStatus(410) to relist."""
        s = self.settings
        stream = self.rest.watch(
            self.path, rv, s.watch_timeout_s, s.watch_timeout_s + s.read_slack_s, self.resource.selector
        )
        connected = False
        for ev in stream:
            if self.stop.is_set():
                break
            if not connected:
                connected = True
                self.sink.report(self.resource.name, SYNCED, call=False)
            kind = ev.get("type")
            obj = ev.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise ApiStatus(
                    self.rest.cluster, code, str(obj.get("reason", "")), str(obj.get("message", ""))
                )
            new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if kind == "BOOKMARK":
                self.stats.bookmarks += 1
                self.sink.touch(self.resource.name, new_rv)
            elif kind in ("ADDED", "MODIFIED", "DELETED"):
                self.stats.events += 1
                self.sink.apply(self.resource.name, kind, obj, new_rv)
            rv = self._rv = new_rv
        self.sink.report(self.resource.name, SYNCED, call=False)
        return rv


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def tenant_namespace_matcher(traits: ClusterTraits) -> Callable[[str], bool]:
    """Whether a namespace is one of the cluster's tenant namespaces (or its own `namespace`)."""
    pattern = traits.tenant_namespace
    if pattern is None:
        return lambda name: name == traits.namespace
    head, _, tail = pattern.partition(TENANT_PLACEHOLDER)
    regex = re.compile(re.escape(head) + r"[a-z0-9]([-a-z0-9]*[a-z0-9])?" + re.escape(tail))
    return lambda name: name == traits.namespace or regex.fullmatch(name) is not None


def _is_reset(e: BaseException) -> bool:
    """A reset connection (the probe retries only that: a 5xx is the cluster's answer, and counts)."""
    return isinstance(e, ClusterUnreachable) and e.cause == CONNECTION_RESET


def _trim_node(node: Obj) -> Obj:
    """Keep what capacity reads of a node (drops images, nodeInfo, managedFields: memory at 100k nodes)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "labels": _interned(meta.get("labels"))},
        "spec": node.get("spec") or {},
        "status": {
            "allocatable": _interned(status.get("allocatable")),
            "conditions": [
                {"type": "Ready", "status": c.get("status")}
                for c in status.get("conditions") or []
                if isinstance(c, dict) and c.get("type") == "Ready"
            ],
        },
    }


def _interned(mapping: Any) -> Any:
    """A str->str mapping with its strings interned: 1,000 nodes of a pool share their label strings."""
    if not isinstance(mapping, dict):
        return mapping or {}
    return {
        sys.intern(k) if isinstance(k, str) else k: sys.intern(v) if isinstance(v, str) else v
        for k, v in mapping.items()
    }


_NRT_RESOURCES = frozenset((capacity.GPU, "cpu"))


def _trim_nrt(nrt: Obj) -> Obj:
    """Keep what capacity reads of a NodeResourceTopology: policy attributes and the Node zones' GPU/cpu."""
    zones = []
    for z in nrt.get("zones") or []:
        if not isinstance(z, dict) or z.get("type") != "Node":
            continue
        resources = [
            r for r in z.get("resources") or [] if isinstance(r, dict) and r.get("name") in _NRT_RESOURCES
        ]
        zones.append({"name": z.get("name"), "type": "Node", "resources": resources})
    out: Obj = {"metadata": {"name": (nrt.get("metadata") or {}).get("name")}, "zones": zones}
    for key in ("attributes", "topologyPolicies"):
        if key in nrt:
            out[key] = nrt[key]
    return out


Requests = tuple[tuple[str, int], ...]  # a pod's non-zero effective requests, sorted, interned


def _add(into: dict[str, int], req: Requests, sign: int) -> None:
    for k, v in req:
        n = into.get(k, 0) + sign * v
        if n:
            into[k] = n
        else:
            into.pop(k, None)


SnapshotCallback = Callable[[ClusterSnapshot, Health, float], None]


class DraState:
    """A cluster's gpu.nvidia.com ResourceSlices by node and the devices its allocated claims hold.

    replace/apply return the nodes whose facts must be recomputed (the node of each touched slice, the
    node of each pool a changed claim allocates from)."""

    def __init__(self) -> None:
        self._slice_node: dict[str, str] = {}  # slice name -> its node (driver gpu.nvidia.com only)
        # parsed once per slice version; a slice that can't be parsed is kept raw, so that merging it
        # raises again and the node is reported bad with the slice's field
        self._by_node: dict[str, dict[str, Obj | dra.ParsedSlice]] = {}
        self._pool_node: dict[str, str] = {}
        self._claims: dict[str, frozenset[dra.DeviceKey]] = {}  # "ns/name" -> devices
        self.used: frozenset[dra.DeviceKey] = frozenset()

    def slices_of(self, node: str) -> list[Obj | dra.ParsedSlice]:
        return list(self._by_node.get(node, {}).values())

    def _put_slice(self, obj: Obj, deleted: bool) -> set[str]:
        name = str((obj.get("metadata") or {}).get("name"))
        touched: set[str] = set()
        old = self._slice_node.pop(name, None)
        if old is not None:
            self._by_node.get(old, {}).pop(name, None)
            touched.add(old)
        spec = obj.get("spec") or {}
        if deleted or spec.get("driver") != dra.DRIVER or not spec.get("nodeName"):
            return touched
        node = str(spec["nodeName"])
        self._slice_node[name] = node
        parsed: Obj | dra.ParsedSlice
        try:
            parsed = dra.parse_slice(obj)
        except _BAD_OBJECT:
            parsed = obj
        self._by_node.setdefault(node, {})[name] = parsed
        self._pool_node[str((spec.get("pool") or {}).get("name", ""))] = node
        touched.add(node)
        return touched

    def _put_claim(self, obj: Obj, deleted: bool) -> set[str]:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        old = self._claims.pop(key, frozenset())
        new = frozenset() if deleted else dra.used_devices([obj])
        new = frozenset(d for d in new if d[0] == dra.DRIVER)
        if new:
            self._claims[key] = new
        return {self._pool_node.get(pool, "") for _drv, pool, _dev in old ^ new}

    def _recount(self) -> None:
        self.used = frozenset(d for devices in self._claims.values() for d in devices)

    def replace(self, resource: str, items: list[Obj]) -> set[str]:
        touched: set[str] = set()
        if resource == "resourceslices":
            touched.update(self._by_node)
            self._slice_node, self._by_node, self._pool_node = {}, {}, {}
            for s in items:
                touched |= self._put_slice(s, False)
        else:
            touched.update(self._pool_node.get(p, "") for c in self._claims.values() for _d, p, _v in c)
            self._claims = {}
            for c in items:
                touched |= self._put_claim(c, False)
            self._recount()
        touched.discard("")
        return touched

    def apply(self, resource: str, event_type: str, obj: Obj) -> set[str]:
        deleted = event_type == "DELETED"
        if resource == "resourceslices":
            touched = self._put_slice(obj, deleted)
        else:
            touched = self._put_claim(obj, deleted)
            self._recount()
        touched.discard("")
        return touched


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
    ) -> None:
        """`rest` is a KubeRest, or a kubeconfig path (with `context`) to build one from. After each batch
        of events (and on every health change) on_snapshot(snapshot, health, heartbeat) and on_change()
        are called from the watcher's flusher thread; summary(traits) is the cheap read for publishers.
        `spot` says how the cluster is declared (which taints count as tolerated) so the index is built
        right the first time; a summary asked with other traits re-aggregates once. `health` sets the
        health machine's thresholds (clusterLostSeconds is its lost_seconds); on_transition(t) is called
        (on the thread that saw it) for every change of shown health, after it is logged."""
        self.cluster = cluster
        self.rest = rest if isinstance(rest, KubeRest) else KubeRest.from_kubeconfig(cluster, rest, context)
        self._on_snapshot = on_snapshot
        self._on_change = on_change
        self._settings = settings or WatchSettings()
        self._flush_interval = flush_interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._nodes: dict[str, Obj] = {}
        self._pods: dict[str, tuple[str, Requests]] = {}  # "namespace/name" of active pods only
        self._requests: dict[Requests, Requests] = {}  # interning: most pods ask for the same things
        self._alloc: dict[str, dict[str, int]] = {}
        self._nrts: dict[str, Obj] = {}
        self._cqs: dict[str, Obj] = {}
        self._dra = DraState()
        # namespaces, resourcequotas, limitranges: "namespace/name" -> object (tenancy)
        self._tenancy: dict[str, dict[str, Obj]] = {r.name: {} for r in TENANCY_RESOURCES}
        self._tenancy_dirty = False
        self._tenancy_cache: tuple[str | None, str, tuple[MemberNamespace, ...]] | None = None
        self._index = CapacityIndex(cluster, spot=spot)
        self._bad: dict[str, str] = {}
        self._queues: tuple[QueueHeadroom, ...] = ()
        self._dirty: set[str] = set()
        self._queues_dirty = False
        self._states: dict[str, str] = {r.name: PENDING for r in resources}
        self._required = {r.name for r in resources if not r.optional}
        self._rv = ""
        self._heartbeat = 0.0  # the last observation of data (list, event, bookmark): snapshot.observed_at
        self._machine = HealthMachine(cluster, health or HealthThresholds(), clock())
        self._on_transition = on_transition
        self.transitions: list[Transition] = []  # the last 50, oldest first
        self._unannounced: list[Transition] = []
        self._last_health: tuple[Health, str] | None = None
        self._pending_since: float | None = None  # arrival of the first event not yet flushed
        # Arrival (epoch s) of the first event of the batch being handed to on_change now: the publisher
        # measures event-to-Redis freshness from it.
        self.batch_first_event_at: float | None = None
        self.stats = WatcherStats()
        self._informers = [Informer(self.rest, r, self, self._stop, self._settings) for r in resources]
        self.stats.informers = {i.resource.name: i.stats for i in self._informers}
        self._flusher: threading.Thread | None = None
        self._prober: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for inf in self._informers:
            inf.start()
        self._flusher = threading.Thread(target=self._flush_loop, name=f"flusher-{self.cluster}", daemon=True)
        self._flusher.start()
        self._prober = threading.Thread(target=self._probe_loop, name=f"prober-{self.cluster}", daemon=True)
        self._prober.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads. A watch blocked in a read ends at its read timeout; threads are daemons."""
        self._stop.set()
        self._wake.set()
        if self._flusher is not None:
            self._flusher.join(timeout)
        self.rest.close()

    # ------------------------------------------------------------------ informer sink

    def replace(self, resource: str, items: list[Obj], rv: str) -> None:
        """A fresh list: forget what we had of this resource and take these items."""
        with self._lock:
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
                self._tenancy[resource] = {_key(o): o for o in items}
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
                    self._tenancy[resource].pop(_key(obj), None)
                else:
                    self._tenancy[resource][_key(obj)] = obj
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
        answered), UNREACHABLE / FORBIDDEN (a list or watch failed; `cause` as broker.health words it).
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

    def probe_once(self) -> Outcome:
        """One liveness probe (GET /version, short deadline), fed to the health machine."""
        timeout = self._settings.probe_timeout
        start = time.monotonic()
        try:
            for attempt in Retrying(  # a reset pooled connection is retried once at once, not reported
                retry=retry_if_exception(_is_reset),
                wait=wait_random_exponential(multiplier=0.05, max=0.2),
                stop=stop_after_attempt(2),
                reraise=True,
            ):
                with attempt:
                    start = time.monotonic()
                    self.rest.probe(timeout)
            outcome = Outcome.success(self._clock(), latency=time.monotonic() - start)
        except ClusterForbidden as e:
            outcome = Outcome.failure(self._clock(), e.cause or str(e), auth=True)
        except ClusterUnreachable as e:
            outcome = Outcome.failure(self._clock(), e.cause or str(e))
        except ApiStatus as e:
            outcome = Outcome.failure(self._clock(), http_cause(e.code, e.reason))
        except Exception as e:  # a probe must never kill its thread
            outcome = Outcome.failure(self._clock(), type(e).__name__)
        if not self._stop.is_set():
            self.observe(outcome)
        return outcome

    def _probe_loop(self) -> None:
        interval = self._settings.probe_interval_s
        self._stop.wait(random.uniform(0.0, interval))  # spread a shard's probes over the interval
        while not self._stop.is_set():
            started = time.monotonic()
            outcome = self.probe_once()
            # In doubt, look again sooner (WatchSettings.probe_retry_interval_s): a failing cluster gives
            # health enough samples to judge within its window, and one success clears it.
            wait = interval if outcome.ok else min(interval, self._settings.probe_retry_interval_s)
            self._stop.wait(max(0.05, wait - (time.monotonic() - started)))

    # ------------------------------------------------------------------ state (under the lock)

    def _observed(self, rv: str) -> None:
        self._heartbeat = self._clock()
        if rv:
            self._rv = rv

    def _put_node(self, node: Obj) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            return  # an unnamed object can't be tracked (the API server never sends one)
        self._nodes[name] = _trim_node(node)
        self._dirty.add(name)

    def _put_pod(self, event_type: str, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        old = self._pods.pop(key, None)
        if old is not None:
            self._unalloc(old[0], old[1])
        if event_type == "DELETED" or not capacity.pod_is_active(pod):
            return
        try:
            raw = tuple(sorted((k, v) for k, v in capacity.pod_requests(pod).items() if v))
        except _BAD_OBJECT as e:
            self.stats.bad_pods += 1
            log.debug("cluster %s: pod %s skipped: %s", self.cluster, key, e)
            return
        req = self._requests.setdefault(raw, raw)
        node = str(pod["spec"]["nodeName"])
        self._pods[key] = (node, req)
        _add(self._alloc.setdefault(node, {}), req, 1)
        self._dirty.add(node)

    def _unalloc(self, node: str, req: Requests) -> None:
        alloc = self._alloc.get(node)
        if alloc is not None:
            _add(alloc, req, -1)
            if not alloc:
                del self._alloc[node]
        self._dirty.add(node)

    def _put_nrt(self, event_type: str, nrt: Obj) -> None:
        name = str((nrt.get("metadata") or {}).get("name"))
        if event_type == "DELETED":
            self._nrts.pop(name, None)
        else:
            self._nrts[name] = _trim_nrt(nrt)
        self._dirty.add(name)

    def _refresh(self) -> None:
        for name in self._dirty:
            node = self._nodes.get(name)
            if node is None:
                self._index.remove(name)
                self._bad.pop(name, None)
                continue
            try:
                facts = capacity.node_facts_from_requests(
                    node, self._alloc.get(name, {}), self._nrts.get(name)
                )
                slices = self._dra.slices_of(name)
                if slices:
                    facts = dra.merge(facts, slices, self._dra.used)
                self._index.upsert(facts)
                self._bad.pop(name, None)
            except _BAD_OBJECT as e:
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
                    queues.extend(capacity.queue_headroom(self._cqs[name]))
                except _BAD_OBJECT as e:
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
        wanted = tenant_namespace_matcher(traits)

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
        Equal to capacity.summarize(self.snapshot(), traits, self.health, self.last_success)."""
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
        )

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=1.0)
            if self._stop.is_set():
                return
            if not self._wake.is_set():
                continue
            self._stop.wait(self._flush_interval)  # let a burst of events land in one batch
            self._wake.clear()
            with self._lock:
                view = self._view()
                health = view.health
                ready = all(self._states[r] not in (PENDING,) for r in self._required)
                if not ready and health not in (Health.UNREACHABLE, Health.FORBIDDEN):
                    continue
                key = (health, view.reason)
                if (
                    not self._dirty
                    and not self._queues_dirty
                    and not self._tenancy_dirty
                    and key == self._last_health
                ):
                    continue
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
