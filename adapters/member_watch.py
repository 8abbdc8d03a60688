"""Follow what goes wrong inside a member with the broker's Jobs: their pods and the Job controller's
FailedCreate events, by watch (docs/health.md, "member trouble").

Owns:
    TroubleCache         one cluster: the broker's pods (labelSelector gpufed.io/job-id) and the
                         FailedCreate events of Jobs (fieldSelector involvedObject.kind=Job,reason=FailedCreate),
                         each judged by broker.workload.member_trouble as it arrives; keeps per Job name only
                         what is wrong (a healthy pod costs one dict entry of None)
    MemberWatchingGateway a WatchingGateway that runs two more informers per cluster into a TroubleCache
                         and answers broker.core.ports.MemberWatch from memory; they connect through the
                         gateway's ConnectGate and run only between start() and suspend(), as its Jobs',
                         and only for a member where the broker has Jobs (the Jobs' cache holds one): a
                         member with none has no pod of the broker's to watch, and a fleet of 1,000
                         idle members costs 1,000 watches, not 3,000 (the first Job seen there starts
                         them, and their first list catches up on what happened before)

Cost follows change, not the jobs held: a quiet cluster costs two watch requests per watch timeout; a
pod's or event's change calls on_change(cluster, job id) only when the Job's MemberTrouble changed
(what wakes the status sync for that one job). No request per job per pass; the only GET is
last_termination's list of one failed Job's pods when the watch has not told its exit code yet.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from adapters.job_informer import ALL_NAMESPACES, JOB_WATCH, WatchingGateway
from adapters.kube_gateway import object_path
from adapters.kube_informer import Informer, Resource, WatchSettings
from adapters.kube_rest import ApiStatus, KubeRest, Obj
from adapters.watch_pacing import ConnectGate
from broker.core.errors import ClusterError
from broker.core.workloads import MemberTrouble, PodTrouble, Termination
from broker.workload import member_trouble
from broker.workload.manifest import JOB_ID_LABEL

log = logging.getLogger(__name__)

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
FAILED_CREATE = "involvedObject.kind=Job,reason=FailedCreate"


def pods_resource(namespace: str) -> Resource:
    """The broker's pods in one namespace (or all): labelled gpufed.io/job-id."""
    path = "/api/v1/pods" if namespace == ALL_NAMESPACES else object_path("v1", "Pod", namespace)
    return Resource("pods", (path,), selector=(("labelSelector", JOB_ID_LABEL),))


def events_resource(namespace: str) -> Resource:
    """The Job controller's FailedCreate events (an admission refusal) in one namespace (or all)."""
    path = "/api/v1/events" if namespace == ALL_NAMESPACES else object_path("v1", "Event", namespace)
    return Resource("events", (path,), selector=(("fieldSelector", FAILED_CREATE),))


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _job_name(pod: Obj) -> str:
    for ref in _meta(pod).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Job":
            return str(ref.get("name") or "")
    return str((_meta(pod).get("labels") or {}).get(JOB_NAME_LABEL) or "")


class TroubleCache:
    """One cluster's member trouble by Job name; an InformerSink for "pods" and "events" (thread-safe).
    `job_id_of(job name)` names the broker job of a Job (the Job cache); on_change(cluster, job id) is
    called when a Job's MemberTrouble changed."""

    def __init__(
        self,
        cluster: str,
        job_id_of: Callable[[str], str | None],
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.job_id_of = job_id_of
        self.on_change = on_change
        self._lock = threading.Lock()
        # pod key -> (Job name, its job id label, trouble, failed termination)
        self._pods: dict[str, tuple[str, str, PodTrouble | None, Termination | None]] = {}
        self._by_job: dict[str, set[str]] = {}
        self._created: dict[str, tuple[str, PodTrouble]] = {}  # event key -> (Job name, FailedCreate)
        self._terms: dict[str, Termination] = {}  # Job name -> last failed termination, while it has pods

    # ------------------------------------------------------------------ reads

    def view(self, name: str) -> MemberTrouble:
        with self._lock:
            return self._view(name)

    def _view(self, name: str) -> MemberTrouble:
        pods = [self._pods[k] for k in self._by_job.get(name, ())]
        trouble = member_trouble.worst(p[2] for p in pods)
        if trouble is None and not pods:  # no pod at all: was its create refused?
            trouble = member_trouble.worst(t for n, t in self._created.values() if n == name)
        return MemberTrouble(trouble, self._terms.get(name))

    # ------------------------------------------------------------------ informer sink

    def replace(self, resource: str, items: list[Obj], rv: str) -> None:
        with self._lock:
            old = self._pods if resource == "pods" else self._created
            touched = {v[0] for v in old.values()}
            before = {n: self._view(n) for n in touched}
            if resource == "pods":
                self._pods, self._by_job = {}, {}
            else:
                self._created = {}
        for obj in items:
            self.apply(resource, "ADDED", obj, rv)
        with self._lock:
            moved = [n for n, v in before.items() if self._view(n) != v]
        self._notify(moved)

    def apply(self, resource: str, event_type: str, obj: Obj, rv: str) -> None:
        meta = _meta(obj)
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        if resource == "pods":
            job = _job_name(obj)
            if not job:
                return
            job_id = str((meta.get("labels") or {}).get(JOB_ID_LABEL) or "")
            with self._lock:
                before = self._view(job)
                self._pods.pop(key, None)
                self._by_job.get(job, set()).discard(key)
                if event_type != "DELETED":
                    term = member_trouble.pod_termination(obj)
                    self._pods[key] = (job, job_id, member_trouble.pod_trouble(obj), term)
                    self._by_job.setdefault(job, set()).add(key)
                    if term is not None:
                        self._terms[job] = term
                elif not self._by_job.get(job):  # its last pod is gone (so is the Job, or soon)
                    self._by_job.pop(job, None)
                    self._terms.pop(job, None)
                after = self._view(job)
            if after != before:
                self._notify([job], job_id)
            return
        trouble = member_trouble.failed_create(obj)
        job = str((obj.get("involvedObject") or {}).get("name") or "")
        with self._lock:
            before = self._view(job)
            self._created.pop(key, None)
            if event_type != "DELETED" and trouble is not None and job:
                self._created[key] = (job, trouble)
            after = self._view(job)
        if after != before:
            self._notify([job])

    def touch(self, resource: str, rv: str) -> None:
        """A bookmark: nothing changed."""

    def report(
        self, resource: str, state: str, detail: str = "", cause: str = "", *, call: bool = True
    ) -> None:
        """Health is the Job informer's and the pollers' business; a failing watch here only delays a reason."""

    def _notify(self, jobs: list[str], job_id: str = "") -> None:
        if self.on_change is None:
            return
        for name in jobs:
            found = self.job_id_of(name) or job_id
            if found:
                self.on_change(self.cluster, found)


class MemberWatchingGateway(WatchingGateway):
    """A WatchingGateway that also follows the broker's pods and the FailedCreate events of its Jobs, and
    answers broker.core.ports.MemberWatch."""

    def __init__(
        self,
        clusters: Mapping[str, KubeRest],
        namespaces: Mapping[str, str],
        settings: WatchSettings = JOB_WATCH,
        gate: ConnectGate | None = None,
    ) -> None:
        self._trouble_lock = threading.Lock()
        self.troubles: dict[str, TroubleCache] = {}
        self._trouble_informers: dict[str, tuple[threading.Event, list[Informer]]] = {}
        self._trouble_targets: dict[str, tuple[KubeRest, str]] = {}  # what suspend() follows afresh
        self._trouble_settings = settings
        self._trouble_started = False
        self._trouble_running: set[str] = set()  # the clusters whose trouble informers run now
        super().__init__(clusters, namespaces, settings, gate)
        for cluster, namespace in namespaces.items():
            self._follow_troubles(clusters[cluster], namespace)
        self.follower.subscribe(self._jobs_moved)

    @classmethod
    def watching(
        cls,
        kubeconfigs: Mapping[str, tuple[Path | str, str | None]],
        namespaces: Mapping[str, str],
        settings: WatchSettings = JOB_WATCH,
    ) -> MemberWatchingGateway:
        rests = {name: KubeRest.from_kubeconfig(name, path, ctx) for name, (path, ctx) in kubeconfigs.items()}
        return cls(rests, namespaces, settings)

    def _job_id_of(self, cluster: str) -> Callable[[str], str | None]:
        def job_id(name: str) -> str | None:
            cache = self.follower.caches.get(cluster)
            return cache.job_id(name) if cache is not None else None

        return job_id

    def _notify(self, cluster: str, job_id: str) -> None:
        self.follower.notify(cluster, job_id)

    def _follow_troubles(self, rest: KubeRest, namespace: str) -> None:
        cluster = rest.cluster
        with self._trouble_lock:
            if cluster in self.troubles:
                return
            self._trouble_watch(rest, namespace)
            if self._trouble_started:
                self._run_troubles(cluster)

    def _jobs_moved(self, cluster: str, job_id: str) -> None:
        """A Job of `cluster` appeared, changed or went (the Jobs' cache said so): its trouble informers
        run while the cache holds a Job there."""
        with self._trouble_lock:
            if self._trouble_started:
                self._run_troubles(cluster)

    def _run_troubles(self, cluster: str) -> None:
        """Start the cluster's trouble informers when the broker has Jobs there, stop them (keeping fresh
        ones, not started) when it has none; the caller holds the lock."""
        cache = self.follower.caches.get(cluster)
        wanted = cache is not None and len(cache) > 0
        entry = self._trouble_informers.get(cluster)
        if entry is None or wanted == (cluster in self._trouble_running):
            return
        if wanted:
            self._trouble_running.add(cluster)
            for informer in entry[1]:
                informer.start()
            return
        self._trouble_running.discard(cluster)
        entry[0].set()
        rest, namespace = self._trouble_targets[cluster]
        self._trouble_watch(rest, namespace)

    def _trouble_watch(self, rest: KubeRest, namespace: str) -> list[Informer]:
        """A new TroubleCache and its two informers (not started); the caller holds the lock."""
        cluster = rest.cluster
        cache = TroubleCache(cluster, self._job_id_of(cluster), self._notify)
        stop = threading.Event()
        s, gate = self._trouble_settings, self.gate
        informers = [
            Informer(rest, pods_resource(namespace), cache, stop, s, gate),
            Informer(rest, events_resource(namespace), cache, stop, s, gate),
        ]
        self.troubles[cluster] = cache
        self._trouble_informers[cluster] = (stop, informers)
        self._trouble_targets[cluster] = (rest, namespace)
        return informers

    def _unfollow_troubles(self, cluster: str) -> None:
        with self._trouble_lock:
            self._trouble_running.discard(cluster)
            self.troubles.pop(cluster, None)
            self._trouble_targets.pop(cluster, None)
            entry = self._trouble_informers.pop(cluster, None)
        if entry is not None:
            entry[0].set()

    def add_cluster(self, rest: KubeRest, namespace: str | None = None) -> None:
        super().add_cluster(rest, namespace)
        if namespace is not None:
            self._follow_troubles(rest, namespace)

    def reconnect_cluster(self, rest: KubeRest, namespace: str | None = None) -> None:
        self._unfollow_troubles(rest.cluster)
        super().reconnect_cluster(rest, namespace)

    def start(self) -> None:
        super().start()
        with self._trouble_lock:
            if self._trouble_started:
                return
            self._trouble_started = True
            for cluster in list(self._trouble_informers):
                self._run_troubles(cluster)  # the members where the broker has Jobs (more as they come)

    def suspend(self) -> None:
        """The Jobs' informers and the member-trouble informers stop; start() follows afresh."""
        with self._trouble_lock:
            was, self._trouble_started = self._trouble_started, False
            if was:
                self._trouble_running.clear()
                for stop, _ in self._trouble_informers.values():
                    stop.set()
                for rest, namespace in list(self._trouble_targets.values()):
                    self._trouble_watch(rest, namespace)
        super().suspend()

    def close(self) -> None:
        with self._trouble_lock:
            entries = list(self._trouble_informers.values())
        for stop, _ in entries:
            stop.set()
        super().close()

    # ------------------------------------------------------------------ MemberWatch

    def member_trouble(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        cache = self.troubles.get(cluster)
        return cache.view(name) if cache is not None else MemberTrouble()

    def last_termination(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        seen = self.member_trouble(cluster, namespace, name)
        if seen.termination is not None:
            return seen
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        try:
            pods, _ = self._rest(cluster).list_pages(
                path, selector=[("labelSelector", f"{JOB_NAME_LABEL}={name}")]
            )
        except (ApiStatus, ClusterError) as exc:
            log.info("cannot list the pods of %s on %s for its exit code: %s", name, cluster, exc)
            return seen
        terms = [t for p in pods if (t := member_trouble.pod_termination(p)) is not None]
        return MemberTrouble(seen.trouble, terms[-1] if terms else None)
