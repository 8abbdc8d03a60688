"""Informers: list + watch one resource of one member cluster, keeping a sink up to date.

Owns the watch protocol:
    Informer        one resource of one cluster (nodes, pods, noderesourcetopologies, Kueue clusterqueues,
                    DRA resourceslices and resourceclaims; namespaces, resourcequotas and limitranges for
                    the tenant namespaces' quotas and limits, summary.namespaces):
                    a paginated list, then a watch from the list's resourceVersion with bookmarks, server
                    timeoutSeconds and a client read timeout; relist on 410 Gone; lists retry transient
                    failures (a reset connection, 5xx, 429) with tenacity's jittered backoff, and a watch
                    cut by a reset resumes from its last resourceVersion after a short jittered pause
                    without telling health (one reset is not a fault); a missing CRD (404) is "absent";
                    with a shared adapters.watch_pacing.ConnectGate, each list request and each watch's
                    set-up waits for a slot (many members never connect all at once), and a watch that
                    ends normally re-watches from its resourceVersion (no LIST), with a jittered
                    timeoutSeconds so that watches started together do not end together
    Resource        which resources a cluster's informers follow (ALL_RESOURCES)

Every informer of a process is a task on one event loop (adapters.watch_loop.shared_loop, its HTTP through
adapters.kube_async): no thread per watch. A failing cluster only fails its own tasks. The sinks
(adapters.cluster_watcher.ClusterWatcher for capacity, adapters.job_informer for the broker's Jobs,
adapters.member_watch, adapters.hub_watcher) are called on the loop's thread and must not block: they
update memory under a short lock and wake whoever publishes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from adapters.kube_rest import ApiStatus, KubeRest, Obj, is_transient
from adapters.watch_loop import WatchLoop, shared_loop
from adapters.watch_pacing import ConnectGate, reconnect_delay, watch_timeout
from broker.core.errors import ClusterForbidden, ClusterUnreachable, MalformedObject
from broker.health.machine import (
    CONNECTION_RESET,
    http_cause,
)

log = logging.getLogger(__name__)

# Informer states
PENDING, SYNCED, UNREACHABLE, FORBIDDEN, ABSENT = "pending", "synced", "unreachable", "forbidden", "absent"
BAD_OBJECT = (MalformedObject, ValueError, TypeError, KeyError, AttributeError)


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
# Tenancy (docs/tenancy.md): which namespaces exist, and their quotas and limits (broker.tenancy.member_quota).
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
    # Each watch asks for watch_timeout_s plus up to this share of it more (adapters.watch_pacing): 0
    # keeps every watch at watch_timeout_s.
    watch_timeout_jitter: float = 0.0
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
    # The liveness probe (its interval is the health thresholds' probe_interval_seconds): a quiet cluster's
    # watches prove nothing for up to watch_timeout_s, and health calls a cluster lost after
    # clusterLostSeconds (10) without a successful call.
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
    """List + watch one resource of one cluster into a sink (a ClusterWatcher, a job cache), as a task on
    an adapters.watch_loop.WatchLoop (the process's shared one unless told)."""

    def __init__(
        self,
        rest: KubeRest,
        resource: Resource,
        sink: InformerSink,
        stop: threading.Event,
        settings: WatchSettings,
        gate: ConnectGate | None = None,
        loop: WatchLoop | None = None,
    ) -> None:
        """`gate`: shared by the informers whose connection set-ups are paced together (None: not paced).
        Setting `stop` ends the informer (its task is cancelled within a fraction of a second)."""
        self.rest = rest
        self.gate = gate
        self.resource = resource
        self.sink = sink
        self.stop = stop
        self.settings = settings
        self.stats = InformerStats()
        self.path = resource.paths[0]
        self._rv = ""  # the resourceVersion the informer is current at ("" = list first)
        self._loop = loop
        self._done: concurrent.futures.Future[None] | None = None

    def start(self) -> None:
        loop = self._loop or shared_loop()
        self._loop = loop
        self._done = loop.submit(self._main(loop))

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for a stopped informer to end."""
        if self._done is not None:
            if self._loop is not None:
                self._loop.check_stops_now()  # a stopped informer ends now, not at the loop's next check
            with contextlib.suppress(Exception):
                self._done.result(timeout)

    async def _main(self, loop: WatchLoop) -> None:
        task = asyncio.current_task()
        assert task is not None
        loop.cancel_on(self.stop, task)
        with contextlib.suppress(asyncio.CancelledError):
            await self.run()

    async def _list(self) -> tuple[list[Obj], str]:
        """List, trying each API version of the resource; ApiStatus(404) when none is served."""
        last: ApiStatus | None = None
        for path in self.resource.paths:
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception(is_transient),
                    wait=wait_random_exponential(multiplier=self.settings.backoff_base_s, max=2.0),
                    stop=stop_after_attempt(self.settings.list_attempts),
                    reraise=True,
                ):
                    with attempt:
                        async with self._slot():
                            items, rv = await self.rest.aio.list_pages(
                                path,
                                self.settings.page_size,
                                self.settings.list_timeout,
                                self.resource.selector,
                            )
                self.path = path
                return items, rv
            except ApiStatus as e:
                if e.code != 404:
                    raise
                last = e
        assert last is not None
        raise last

    async def run(self) -> None:
        self._rv = ""
        failures = 0
        transient = 0  # consecutive transient failures not (yet) reported to health
        s = self.settings
        while not self.stop.is_set():
            attempt_started = time.monotonic()
            try:
                if not self._rv:
                    items, rv = await self._list()
                    self.stats.lists += 1
                    self.sink.replace(self.resource.name, items, rv)
                    del items  # the whole list (every pod in full) must not live as long as the watch
                    self.sink.report(self.resource.name, SYNCED)
                    self._rv = rv
                self._rv = await self._watch(self._rv)
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
                    await asyncio.sleep(s.absent_recheck_s)
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
                    await asyncio.sleep(random.uniform(0.0, s.backoff_base_s))
                    continue
                failures += 1
                self.sink.report(self.resource.name, UNREACHABLE, str(e), e.cause)
            except Exception as e:  # never let one resource's surprise end the informer
                failures += 1
                self.stats.errors += 1
                log.exception("cluster %s: %s informer failed", self.rest.cluster, self.resource.name)
                self.sink.report(
                    self.resource.name, UNREACHABLE, f"{type(e).__name__}: {e}", type(e).__name__
                )
            if failures:
                await asyncio.sleep(
                    reconnect_delay(failures, s.backoff_base_s, s.backoff_max_s, random.random())
                )

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """A connection set-up: through the gate when there is one."""
        if self.gate is None:
            yield
            return
        async with self.gate.slot():
            yield

    async def _watch(self, rv: str) -> str:
        """One watch request; returns the resourceVersion to resume from. Raises ApiStatus(410) to relist."""
        s = self.settings
        seconds = watch_timeout(s.watch_timeout_s, s.watch_timeout_jitter, random.random())
        aio = self.rest.aio
        async with self._slot():  # the set-up (connection, TLS, the answer's head); the stream holds no slot
            resp = await aio.open_watch(
                self.path, rv, seconds, seconds + s.read_slack_s, self.resource.selector
            )
        connected = False
        async with contextlib.aclosing(aio.events(resp, self.path, seconds + s.read_slack_s)) as stream:
            async for ev in stream:
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


def object_key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


def is_reset(e: BaseException) -> bool:
    """A reset connection (the probe retries only that: a 5xx is the cluster's answer, and counts)."""
    return isinstance(e, ClusterUnreachable) and e.cause == CONNECTION_RESET
