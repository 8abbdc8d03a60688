"""The hub cluster's side of kubectl-native submission (docs/hub.md): watch, write back, record events.

Owns the I/O with the hub (the decisions are broker.workload.hub_objects' and broker.ha.hub_sync's):
    HubCache      one watched kind's objects whose spec.managedBy is gpufed.io/broker (an InformerSink:
                  list + watch by adapters.kube_informer.Informer, relist on 410); every add, change and
                  delete is handed to `on_event(kind, type, obj)`, a relist that no longer holds an object
                  included (a delete missed while the watch was down)
    HubWatcher    the kinds of broker.workload.hub_objects.WATCHED_KINDS the hub serves (discovery:
                  GET /apis/<group>/<version>), looked up again every discoverySeconds, so a kind whose
                  CRD is installed later is picked up; one informer per kind (per namespace when
                  hub.namespaces is set). A kind not served is said once in the log.
                  write(...)  the annotations (merged) and the status subresource (replaced) of one hub
                              object: read, change, PUT; a 409 (someone wrote meanwhile) reads again
                  event(...)  a core/v1 Event about a hub object (`kubectl describe` shows it)
Every request goes through adapters.kube_rest.KubeRest (deadlines, mapped errors).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from adapters.kube_informer import ABSENT, SYNCED, Informer, Resource, WatchSettings
from adapters.kube_rest import ApiStatus, KubeRest, Obj
from broker.core.errors import ClusterError
from broker.workload.hub_objects import WATCHED_KINDS, WatchedKind, is_managed

log = logging.getLogger(__name__)

# (kind, "ADDED" | "MODIFIED" | "DELETED", the object)
HubEvent = Callable[[WatchedKind, str, Obj], None]
HUB_WATCH = WatchSettings(watch_timeout_s=60, read_slack_s=15.0)
_WRITE_ATTEMPTS = 3


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class HubCache:
    """One kind's managed objects on the hub (every namespace, or the listed ones), as the watch said."""

    def __init__(self, kind: WatchedKind, on_event: HubEvent) -> None:
        self.kind = kind
        self._on_event = on_event
        self._objects: dict[tuple[str, str], Obj] = {}
        self._states: dict[str, str] = {}  # informer (resource name) -> state
        self._lock = threading.Lock()

    @property
    def synced(self) -> bool:
        """Every informer of the kind has listed and its watch is healthy."""
        with self._lock:
            return bool(self._states) and all(s == SYNCED for s in self._states.values())

    def expect(self, resource: str) -> None:
        with self._lock:
            self._states.setdefault(resource, "pending")

    def objects(self) -> list[Obj]:
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def replace(self, resource: str, items: list[Obj], rv: str) -> None:
        fresh = {_key(o): o for o in items if is_managed(o)}
        with self._lock:
            old = self._objects
            # a namespaced informer's relist replaces its namespace only (one informer per namespace)
            scope = resource.rsplit("@", 1)[1] if "@" in resource else None
            gone = [o for k, o in old.items() if k not in fresh and (scope is None or k[0] == scope)]
            changed = [o for k, o in fresh.items() if _rv(old.get(k)) != _rv(o)]
            for o in gone:
                old.pop(_key(o), None)
            old.update(fresh)
        for o in gone:
            self._on_event(self.kind, "DELETED", o)
        for o in changed:
            self._on_event(self.kind, "MODIFIED", o)

    def apply(self, resource: str, event_type: str, obj: Obj, rv: str) -> None:
        key = _key(obj)
        with self._lock:
            had = key in self._objects
            if event_type == "DELETED" or not is_managed(obj):
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
        if event_type == "DELETED" and had:
            self._on_event(self.kind, "DELETED", obj)
        elif event_type != "DELETED" and is_managed(obj):
            self._on_event(self.kind, event_type, obj)

    def touch(self, resource: str, rv: str) -> None:
        return None

    def report(
        self, resource: str, state: str, detail: str = "", cause: str = "", *, call: bool = True
    ) -> None:
        with self._lock:
            before = self._states.get(resource)
            self._states[resource] = state
        if before != state and state not in (SYNCED, ABSENT):
            log.warning("hub: %s (%s): %s %s", self.kind.resource, resource, state, detail)


def _rv(obj: Mapping[str, Any] | None) -> str:
    return "" if obj is None else str((obj.get("metadata") or {}).get("resourceVersion") or "")


class HubWatcher:
    """The hub's managed objects of every watched kind it serves, and the writes back to them."""

    def __init__(
        self,
        rest: KubeRest,
        on_event: HubEvent,
        namespaces: list[str] | None = None,
        discovery_seconds: float = 60.0,
        settings: WatchSettings = HUB_WATCH,
        kinds: tuple[WatchedKind, ...] = WATCHED_KINDS,
    ) -> None:
        self.rest = rest
        self.namespaces = namespaces
        self.discovery_seconds = discovery_seconds
        self.settings = settings
        self.kinds = kinds
        self.caches: dict[str, HubCache] = {k.resource: HubCache(k, on_event) for k in kinds}
        self._informers: list[Informer] = []
        self._said_absent: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ discovery and informers

    def served(self, kind: WatchedKind) -> bool:
        """Whether the hub serves the kind (its group/version lists the plural)."""
        base = f"/apis/{kind.api_version}" if kind.group else f"/api/{kind.version}"
        try:
            body = self.rest.request("GET", base)
        except ApiStatus as e:
            if e.code == 404:
                return False
            raise
        return any(
            isinstance(r, Mapping) and r.get("name") == kind.plural for r in body.get("resources") or []
        )

    def discover_once(self) -> list[WatchedKind]:
        """Start following the kinds the hub serves now and did not before. Returns those started."""
        started: list[WatchedKind] = []
        for kind in self.kinds:
            cache = self.caches[kind.resource]
            if any(i.sink is cache for i in self._informers):
                continue
            try:
                serving = self.served(kind)
            except ClusterError as e:
                log.warning("hub: cannot read the API of %s: %s", kind.resource, e)
                continue
            if not serving:
                if kind.resource not in self._said_absent:
                    self._said_absent.add(kind.resource)
                    log.info(
                        "hub: %s %s is not served; skipped (looked up again every %.0f s)",
                        kind.api_version,
                        kind.kind,
                        self.discovery_seconds,
                    )
                continue
            scopes: list[str | None] = list(self.namespaces) if self.namespaces else [None]
            for namespace in scopes:
                name = f"hub-{kind.resource}" + (f"@{namespace}" if namespace else "")
                resource = Resource(name, (kind.path(namespace),), optional=True)
                cache.expect(name)
                informer = Informer(self.rest, resource, cache, self._stop, self.settings)
                self._informers.append(informer)
                informer.start()
            log.info("hub: following %s %s", kind.api_version, kind.kind)
            started.append(kind)
        return started

    def synced(self, kind: WatchedKind) -> bool:
        return self.caches[kind.resource].synced

    def objects(self) -> list[tuple[WatchedKind, Obj]]:
        return [(c.kind, o) for c in self.caches.values() for o in c.objects()]

    def get(self, kind: WatchedKind, namespace: str, name: str) -> Obj | None:
        return self.caches[kind.resource].get(namespace, name)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.discover_once()
            except Exception:  # the discovery thread never dies; the next round tries again
                log.exception("hub: discovery failed")
            self._stop.wait(self.discovery_seconds)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufed-hub-discovery", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        for informer in self._informers:
            informer.join(max(0.0, deadline - time.monotonic()))
        self.rest.close()

    # ------------------------------------------------------------------ writes

    def write(
        self,
        kind: WatchedKind,
        namespace: str,
        name: str,
        annotations: Mapping[str, str],
        status: Mapping[str, Any] | None,
    ) -> bool:
        """Merge `annotations` into the object's and, with a status, replace its status subresource.
        False when the object is gone (404)."""
        path = kind.path(namespace, name)
        for _ in range(_WRITE_ATTEMPTS):
            try:
                current = self.rest.request("GET", path)
                meta = current.setdefault("metadata", {})
                have = meta.get("annotations") or {}
                if any(have.get(k) != v for k, v in annotations.items()):
                    meta["annotations"] = {**have, **annotations}
                    current = self.rest.request("PUT", path, body=current)
                if status is not None:
                    current["status"] = dict(status)
                    self.rest.request("PUT", f"{path}/status", body=current)
                return True
            except ApiStatus as e:
                if e.code == 404:
                    return False
                if e.code != 409:
                    raise
        log.info("hub: %s %s/%s kept changing; written at the next change", kind.kind, namespace, name)
        return True

    def event(self, kind: WatchedKind, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about a hub object, from the broker."""
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        now = time.time()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{int(now * 1e6):x}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": kind.api_version,
                "kind": kind.kind,
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": "gpufed-broker"},
            "reportingComponent": "gpufed.io/broker",
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
        }
        self.rest.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
