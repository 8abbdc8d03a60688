"""Follow the broker's Jobs in member clusters by watch, not by a GET per job per pass.

Owns the read side of the broker's Jobs:
    JobCache          one cluster's namespace (or all of them, where tenants have namespaces of their own):
                      {Job name: (WorkloadStatus, WorkloadRef)} for the batch/v1
                      Jobs labelled gpufed.io/job-id, fed by an adapters.kube_informer.Informer (paginated
                      list, watch from its resourceVersion with bookmarks, relist on 410, jittered backoff
                      on errors); synced once listed and while its watch is healthy
    JobFollower       one JobCache + Informer thread per member cluster; start / suspend / stop. The
                      informers of all clusters share one adapters.watch_pacing.ConnectGate: at most
                      DEFAULT_CONNECTS lists or watch set-ups in flight at once, however many members
    WatchingGateway   a KubeGateway whose read_workload and list_workloads answer from the caches; its
                      informers run only between start() and suspend() (broker.app.main: while this
                      replica leads), and reads fall back to requests while they do not

What is served from memory and what still costs a request:
    read_workload     a Job in a synced cache: from the cache, no request. A Job a synced cache does not
                      hold: one GET to confirm it is gone (a watch that hangs without closing looks synced
                      until its read timeout, and "not found" makes the service re-queue the job, so
                      absence is never taken from memory alone). A cluster whose cache is not synced
                      (starting, unreachable, forbidden) or another namespace: the GET, as before.
    list_workloads    a synced cache: from memory; otherwise the LIST, as before.
So a running job costs no member API request at all; a cluster costs one watch request per
watch_timeout_s (60 s by default) plus a list at start and after a 410.

The workload kinds' objects (JobSet, TrainJob, PyTorchJob, RayJob) are followed the same way, one
adapters.kind_informer.KindCache and informer per kind per cluster: read_object answers from them, and
their changes reach the subscribers as a Job's do.

Change events (broker.core.ports.WorkloadWatch): `subscribe(on_change)` calls on_change(cluster, job id) from
the informer thread whenever a followed Job's status changes, appears or goes (a relist compares with
what the cache held): what wakes the leader's status sync (broker.controller.status_sync). A create's
POST answer is put into the cache at once (`created_job`), unless the watch already said more or said
the Job was deleted, so a Job just created is read without a GET.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.kind_informer import KindCache, kind_resource
from adapters.kube_gateway import KubeGateway, object_path, workload_ref, workload_status
from adapters.kube_informer import (
    FORBIDDEN,
    PENDING,
    SYNCED,
    UNREACHABLE,
    Informer,
    InformerStats,
    Resource,
    WatchSettings,
)
from adapters.kube_rest import KubeRest, Obj
from adapters.watch_pacing import ConnectGate
from broker.core.workloads import WorkloadRef, WorkloadStatus
from broker.workload.kinds.registry import KINDS
from broker.workload.manifest import JOB_ID_LABEL

log = logging.getLogger(__name__)

# A Job's status matters at human time scales, and every watch request is one member API request: a
# watch of 60 s costs a quiet cluster one request a minute. The read timeout (60 + 15 s) bounds how long
# a connection that hangs without closing goes unnoticed.
# Each watch asks for 60-90 s (watch_timeout_jitter), so the watches of many members, started together,
# do not all end and re-watch together.
JOB_WATCH = WatchSettings(watch_timeout_s=60, read_slack_s=15.0, watch_timeout_jitter=0.5)


ALL_NAMESPACES = ""  # a JobCache of every namespace (tenant namespaces, docs/tenancy.md)

# JobCache versions: one count for every cache, so that a fresh cache (a leader elected again) never
# repeats a version an earlier one gave (broker.core.ports.ListingVersion)
_VERSIONS = itertools.count(1)


def jobs_resource(namespace: str) -> Resource:
    """The broker's Jobs in one namespace (or in all, ALL_NAMESPACES): the label selector is existence of
    gpufed.io/job-id."""
    path = "/apis/batch/v1/jobs" if namespace == ALL_NAMESPACES else object_path("batch/v1", "Job", namespace)
    return Resource("jobs", (path,), selector=(("labelSelector", JOB_ID_LABEL),))


@dataclass(frozen=True)
class _Entry:
    status: WorkloadStatus
    ref: WorkloadRef | None  # None: labels not in a shape the broker writes


class JobCache:
    """The broker's Jobs of one cluster's namespace, as the watch last said. An InformerSink; every
    method is thread-safe (the informer thread writes, the control loop reads). `on_change(cluster,
    job id)` is called for every Job whose status (or presence) changed: what wakes the controller."""

    def __init__(
        self, cluster: str, namespace: str, on_change: Callable[[str, str], None] | None = None
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.on_change = on_change
        self._lock = threading.Lock()
        self._jobs: dict[str, _Entry] = {}
        self._deleted: dict[str, None] = {}  # names a watch said DELETED (a late create answer is stale)
        self._state = PENDING
        self._stopping = False
        self.version = next(_VERSIONS)  # a new one whenever the Jobs held change (refs() may differ)

    # ------------------------------------------------------------------ reads

    @property
    def state(self) -> str:
        return self._state

    @property
    def synced(self) -> bool:
        """Listed, and the watch has not failed since: the cache can answer for the cluster."""
        return self._state == SYNCED

    def covers(self, namespace: str) -> bool:
        return self.namespace in (ALL_NAMESPACES, namespace)

    def get(self, name: str, namespace: str | None = None) -> WorkloadStatus | None:
        """The Job's status (in `namespace`, when given), or None when the cache holds no such Job.
        Names are unique in a cluster (job id and attempt), so a cache of all namespaces keys by name."""
        with self._lock:
            entry = self._jobs.get(name)
        if entry is None or (namespace is not None and entry.status.namespace != namespace):
            return None
        return entry.status

    def job_id(self, name: str) -> str | None:
        """The broker job id of the Job `name`, when the cache holds it."""
        with self._lock:
            entry = self._jobs.get(name)
        return entry.ref.job_id if entry is not None and entry.ref is not None else None

    def refs(self, namespace: str | None = None) -> list[WorkloadRef]:
        with self._lock:
            return [
                e.ref
                for e in self._jobs.values()
                if e.ref is not None and (namespace is None or e.ref.namespace == namespace)
            ]

    def __len__(self) -> int:
        return len(self._jobs)

    # ------------------------------------------------------------------ informer sink

    def _entry(self, job: Obj) -> tuple[str, _Entry] | None:
        name = (job.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            return None  # an unnamed object can't be tracked (the API server never sends one)
        namespace = self.namespace or str((job.get("metadata") or {}).get("namespace") or "")
        return name, _Entry(workload_status(job, name, namespace), workload_ref(job, namespace))

    def _changed(self, entries: list[_Entry]) -> None:
        if self.on_change is None:
            return
        for e in entries:
            if e.ref is not None:
                self.on_change(self.cluster, e.ref.job_id)

    def replace(self, resource: str, items: list[Obj], rv: str) -> None:
        entries = dict(e for e in map(self._entry, items) if e is not None)
        with self._lock:
            before, self._jobs = self._jobs, entries
            self.version = next(_VERSIONS)
        moved = [e for n, e in entries.items() if (b := before.get(n)) is None or b.status != e.status]
        self._changed(moved + [e for n, e in before.items() if n not in entries])

    def apply(self, resource: str, event_type: str, obj: Obj, rv: str) -> None:
        entry = self._entry(obj)
        if entry is None:
            return
        name, new = entry
        with self._lock:
            if event_type == "DELETED":
                old = self._jobs.pop(name, None)
                self._deleted[name] = None
                while len(self._deleted) > 10_000:
                    del self._deleted[next(iter(self._deleted))]
            else:
                old = self._jobs.get(name)
                self._jobs[name] = new
            self.version = next(_VERSIONS)
        if old is None or old.status != new.status or event_type == "DELETED":
            self._changed([new])

    def seed(self, job: Obj) -> None:
        """The API server's answer to this broker's create: held until the watch says more (never over
        what the watch said, nor for a Job it said was deleted)."""
        entry = self._entry(job)
        if entry is None or entry[1].ref is None:
            return  # not labelled as the broker's (the watch would not follow it either)
        with self._lock:
            if entry[0] in self._jobs or entry[0] in self._deleted:
                return
            self._jobs[entry[0]] = entry[1]
            self.version = next(_VERSIONS)
        self._changed([entry[1]])

    def touch(self, resource: str, rv: str) -> None:
        """A bookmark: nothing changed up to rv."""

    def report(
        self, resource: str, state: str, detail: str = "", cause: str = "", *, call: bool = True
    ) -> None:
        """The informer's state (SYNCED after a list or while a watch delivers; UNREACHABLE / FORBIDDEN
        after a failure it did not retry quietly). `cause` and `call` are for health (ClusterWatcher)."""
        if self._stopping:
            return  # stopping closes the streams; that is not the cluster's fault
        before, self._state = self._state, state
        if before != state and state in (UNREACHABLE, FORBIDDEN):
            log.warning(
                "cluster %s: watch of Jobs %s (%s); status reads fall back to GET",
                self.cluster,
                state,
                detail,
            )
        elif before != state and state == SYNCED:
            log.info("cluster %s: Jobs in %s followed by watch", self.cluster, self.namespace)

    def stopping(self) -> None:
        self._stopping = True
        self._state = PENDING


class JobFollower:
    """One JobCache and one informer thread per member cluster."""

    def __init__(
        self,
        clusters: Mapping[str, KubeRest],
        namespaces: Mapping[str, str],
        settings: WatchSettings = JOB_WATCH,
        gate: ConnectGate | None = None,
    ) -> None:
        """`namespaces` names the clusters to follow and the namespace the broker's Jobs live in there.
        `gate`: paces the informers' connection set-ups (default: a gate of its own)."""
        self._stop = threading.Event()
        self._settings = settings
        self.gate = gate or ConnectGate()
        self.caches: dict[str, JobCache] = {}
        self.informers: dict[str, Informer] = {}
        # per cluster, the workload kinds' objects (adapters.kind_informer): {(apiVersion, kind): cache}
        self.kind_caches: dict[str, dict[tuple[str, str], KindCache]] = {}
        self.kind_informers: dict[str, list[Informer]] = {}
        self._stops: dict[str, threading.Event] = {}  # per cluster: remove() ends one informer
        self._started = False
        self._lock = threading.Lock()  # add() may come from another thread (the ClusterProfile sync)
        self._subscribers: list[Callable[[str, str], None]] = []
        for cluster, namespace in namespaces.items():
            self.add(clusters[cluster], namespace)

    def add(self, rest: KubeRest, namespace: str) -> None:
        """Follow one more cluster (started at once when the others run). Already followed: no change."""
        cluster = rest.cluster
        with self._lock:
            if cluster in self.caches:
                return
            informer = self._follow(rest, namespace)
            if self._started and not self._stop.is_set():
                for each in (informer, *self.kind_informers[cluster]):
                    each.start()

    def _follow(self, rest: KubeRest, namespace: str) -> Informer:
        """A new cache and informer (not started) for one cluster; the caller holds the lock."""
        cache = JobCache(rest.cluster, namespace, self._notify)
        stop = self._stops[rest.cluster] = threading.Event()
        informer = Informer(rest, jobs_resource(namespace), cache, stop, self._settings, self.gate)
        self.informers[rest.cluster] = informer
        self.caches[rest.cluster] = cache
        kinds = {key: KindCache(rest.cluster, namespace, kind, self._notify) for key, kind in KINDS.items()}
        self.kind_caches[rest.cluster] = kinds
        self.kind_informers[rest.cluster] = [
            Informer(rest, kind_resource(c.kind, namespace), c, stop, self._settings, self.gate)
            for c in kinds.values()
        ]
        return informer

    def subscribe(self, on_change: Callable[[str, str], None]) -> None:
        """Call on_change(cluster, job id) when a followed Job's status changes (an informer thread)."""
        with self._lock:
            self._subscribers.append(on_change)

    def notify(self, cluster: str, job_id: str) -> None:
        """Tell the subscribers that something of this job changed (the pods' watch says so too)."""
        self._notify(cluster, job_id)

    def _notify(self, cluster: str, job_id: str) -> None:
        for subscriber in list(self._subscribers):
            subscriber(cluster, job_id)

    def remove(self, cluster: str) -> None:
        """Stop following one cluster (its informer ends at its next read; reads fall back to GET until
        it is added again). Not followed: no change."""
        with self._lock:
            cache = self.caches.pop(cluster, None)
            self.informers.pop(cluster, None)
            self.kind_informers.pop(cluster, None)
            kinds = self.kind_caches.pop(cluster, {})
            stop = self._stops.pop(cluster, None)
        if stop is not None:
            stop.set()
        if cache is not None:
            cache.stopping()
        for kind_cache in kinds.values():
            kind_cache.stopping()

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            for cluster, informer in self.informers.items():
                for each in (informer, *self.kind_informers[cluster]):
                    each.start()

    def suspend(self) -> None:
        """Stop every informer, keep following the same clusters: each gets a fresh cache (not synced:
        reads fall back to requests) and an informer that start() starts again, listing afresh. The old
        threads end at their next read and write only into the caches they were given, no longer read."""
        with self._lock:
            if not self._started:
                return
            self._started = False
            old = [(self._stops[c], self.caches[c], self.informers[c]) for c in list(self.caches)]
            for stop, cache, informer in old:
                stop.set()
                cache.stopping()
                for kind_cache in self.kind_caches[cache.cluster].values():
                    kind_cache.stopping()
                self._follow(informer.rest, cache.namespace)

    @property
    def started(self) -> bool:
        return self._started

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the threads, waiting at most `timeout` in all. A watch blocked in a read ends at its next
        event or bookmark, when its connection closes, or at its read timeout; the threads are daemons
        and, once stopped, change nothing."""
        with self._lock:
            self._stop.set()
            for stop in self._stops.values():
                stop.set()
            caches, informers = list(self.caches.values()), list(self.informers.values())
            kinds = [k for each in self.kind_caches.values() for k in each.values()]
            informers += [i for each in self.kind_informers.values() for i in each]
        for cache in caches:
            cache.stopping()
        for kind_cache in kinds:
            kind_cache.stopping()
        deadline = time.monotonic() + timeout
        for informer in informers:
            informer.join(max(0.0, deadline - time.monotonic()))

    def stats(self, cluster: str) -> InformerStats:
        return self.informers[cluster].stats


class WatchingGateway(KubeGateway):
    """KubeGateway (create and delete unchanged) whose reads are served by JobFollower caches. A cluster
    added later with add_cluster(rest, namespace) is followed too; without a namespace its reads are GETs."""

    def __init__(
        self,
        clusters: Mapping[str, KubeRest],
        namespaces: Mapping[str, str],
        settings: WatchSettings = JOB_WATCH,
        gate: ConnectGate | None = None,
    ) -> None:
        super().__init__(clusters)
        self.gate = gate or ConnectGate()  # every informer of this gateway connects through it
        self.follower = JobFollower(clusters, namespaces, settings, self.gate)
        self.served_from_cache = 0  # read_workload answers that cost no request

    @classmethod
    def watching(
        cls,
        kubeconfigs: Mapping[str, tuple[Path | str, str | None]],
        namespaces: Mapping[str, str],
        settings: WatchSettings = JOB_WATCH,
    ) -> WatchingGateway:
        """{cluster: (kubeconfig path, context)} and {cluster: namespace} -> a gateway, not yet started."""
        rests = {name: KubeRest.from_kubeconfig(name, path, ctx) for name, (path, ctx) in kubeconfigs.items()}
        return cls(rests, namespaces, settings)

    def add_cluster(self, rest: KubeRest, namespace: str | None = None) -> None:
        super().add_cluster(rest)
        if namespace is not None:
            self.follower.add(rest, namespace)

    def reconnect_cluster(self, rest: KubeRest, namespace: str | None = None) -> None:
        """A member cluster re-pointed (kubeconfig, context, followed namespace): creates, deletes and reads
        go through `rest` from now on, its Jobs are followed afresh, and the old client is closed."""
        old = self._clusters.get(rest.cluster)
        self.follower.remove(rest.cluster)
        self.add_cluster(rest, namespace)
        if old is not None and old is not rest:
            old.close()

    def start(self) -> None:
        """Start following every cluster's Jobs (one thread each). Reads fall back to GET until synced."""
        self.follower.start()

    def suspend(self) -> None:
        """Stop following (no list or watch on any member) until start() again; reads are requests
        meanwhile, and no change is told to the subscribers (nothing watches)."""
        self.follower.suspend()

    def close(self) -> None:
        self.follower.stop()
        super().close()

    def synced(self, cluster: str) -> bool:
        cache = self.follower.caches.get(cluster)
        return cache is not None and cache.synced

    def kinds_synced(self, cluster: str) -> bool:
        """broker.workload.kinds.follow.KindWatch: every workload kind's objects of the cluster are
        followed by watch (or its API is not served), so a change of one says so (subscribe)."""
        kinds = self.follower.kind_caches.get(cluster) or {}
        return bool(kinds) and self.follower.started and all(c.answers for c in kinds.values())

    def read_object(
        self, cluster: str, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """A workload kind's object from its watch cache (no request); otherwise, or when the cache holds
        none of that name (just created, or gone: confirmed by the cluster), the GET."""
        cache = self.follower.kind_caches.get(cluster, {}).get((api_version, kind))
        if cache is not None and cache.answers and cache.covers(namespace):
            obj = cache.get(name, namespace)
            if obj is not None:
                self.served_from_cache += 1
                return dict(obj)
        return super().read_object(cluster, api_version, kind, namespace, name)

    def subscribe(self, on_change: Callable[[str, str], None]) -> None:
        """broker.core.ports.WorkloadWatch: on_change(cluster, job id) whenever a broker Job's status changes."""
        self.follower.subscribe(on_change)

    def created_job(self, cluster: str, job: Mapping[str, Any]) -> None:
        """Keep the create's answer: the Job is known at once, without a GET, until the watch says more."""
        cache = self.follower.caches.get(cluster)
        namespace = str((job.get("metadata") or {}).get("namespace") or "")
        if cache is not None and cache.covers(namespace):
            cache.seed(dict(job))

    def _cache(self, cluster: str, namespace: str) -> JobCache | None:
        cache = self.follower.caches.get(cluster)
        if cache is None or not cache.synced or not cache.covers(namespace):
            return None
        return cache

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        cache = self._cache(cluster, namespace)
        if cache is not None:
            status = cache.get(name, namespace)
            if status is not None:
                self.served_from_cache += 1
                return status
        # Not synced, or not in the cache: ask the cluster (a Job only just created, or really gone).
        return super().read_workload(cluster, namespace, name)

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        cache = self._cache(cluster, namespace)
        if cache is not None:
            return cache.refs(namespace) + self.kind_refs(cluster, namespace)
        return super().list_workloads(cluster, namespace)

    def listing_version(self, cluster: str, namespace: str) -> int | None:
        """broker.core.ports.ListingVersion: the cache's version while list_workloads answers from it
        alone; None when the cache is not synced, or the member serves a workload kind (those objects
        are listed by request)."""
        cache = self._cache(cluster, namespace)
        if cache is None or self.kinds_served(cluster):
            return None
        return cache.version
