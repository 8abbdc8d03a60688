"""One simulated cluster's objects: an in-memory etcd with resourceVersions, watch history and listeners.

Contract (the API server and the controllers both build on it):
- Objects are plain JSON dicts. A stored dict is never mutated in place: every write stores a new dict,
  so readers (list, watch fan-out, serialisers) may hold references without copying.
- One cluster-wide resourceVersion counter, like etcd's revision; every write bumps it and stamps
  metadata.resourceVersion (a decimal string).
- Each resource keeps a bounded history of WatchEvents, each with the object before the write (`prev`), so
  a selector-filtered watch can tell an object leaving its selector from one it never matched.
- Each resource's history is bounded: events_since(key, rv) raises Gone when rv is
  older than what is retained (the API answers 410 Expired; clients relist).
- Listeners (subscribe) are called synchronously after each write, on the thread that wrote. The whole
  simulation runs on one asyncio loop, so no locking is needed.
- Errors are the StoreError subclasses below; the API server maps them to Status bodies.
- Deletion follows the registry: `request_delete` marks an object that has finalizers (or a grace period)
  with metadata.deletionTimestamp + deletionGracePeriodSeconds instead of removing it, and any update that
  leaves such an object with no finalizers and a zero grace period removes it. `delete` removes at once
  (a force delete).
"""

from __future__ import annotations

import builtins
import copy
import math
import pickle
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


class StoreError(Exception):
    """Base of store errors; `reason` is the Kubernetes Status reason, `code` the HTTP code."""

    reason = "InternalError"
    code = 500


class NotFoundError(StoreError):
    reason, code = "NotFound", 404


class AlreadyExistsError(StoreError):
    reason, code = "AlreadyExists", 409


class ConflictError(StoreError):
    reason, code = "Conflict", 409


class GoneError(StoreError):
    reason, code = "Expired", 410


class InvalidError(StoreError):
    """422 Invalid; `causes` are (field, message) pairs."""

    reason, code = "Invalid", 422

    def __init__(self, message: str, causes: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.causes = list(causes)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    key: str  # resource key, e.g. "pods" or "jobs.batch"
    obj: Obj
    rv: int
    prev: Obj | None = None  # the object before this write (None for ADDED); selectors filter on both


Listener = Callable[[WatchEvent], None]


_LAST_SECOND: tuple[int, str] = (-1, "")


def rfc3339(epoch: float) -> str:
    """The second `epoch` falls in, as Kubernetes writes timestamps. The last second's text is kept: the
    controllers stamp thousands of conditions and events a second with the same one."""
    global _LAST_SECOND
    second = math.floor(epoch)
    last = _LAST_SECOND
    if last[0] == second:
        return last[1]
    text = datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _LAST_SECOND = (second, text)
    return text


def released(obj: Obj, key: str = "") -> bool:
    """An object being deleted whose finalizers are all gone and whose grace period is over (zero). A
    namespace also waits for its spec.finalizers (the namespace controller's `kubernetes`)."""
    meta = obj.get("metadata") or {}
    if key == "namespaces" and (obj.get("spec") or {}).get("finalizers"):
        return False
    return bool(
        meta.get("deletionTimestamp")
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )


def clone(obj: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, strings, numbers): a pickle round trip, several
    times cheaper than copy.deepcopy, which a simulated API server does for every write it stores."""
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


class ObjectStore:
    """All objects of one cluster, keyed by resource key then (namespace, name)."""

    def __init__(self, now: Callable[[], float], history: int = 20_000) -> None:
        self._now = now
        self._history_len = history
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: dict[str, deque[WatchEvent]] = {}
        self._dropped_upto: dict[str, int] = {}  # highest rv no longer retained, per key
        self._listeners: dict[str, list[Listener]] = {}
        self._rv = 0

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, key: str, namespace: str, name: str) -> Obj:
        try:
            return self._objects[key][(namespace, name)]
        except KeyError:
            raise NotFoundError(f'{key} "{name}" not found') from None

    def find(self, key: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(key, {}).get((namespace, name))

    def list(self, key: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        """Objects of a resource (all namespaces when namespace is None) and the current rv."""
        objs = self._objects.get(key, {})
        if namespace is None:
            return list(objs.values()), self._rv
        return [o for (ns, _), o in objs.items() if ns == namespace], self._rv

    def list_at(self, key: str, rv: int, namespace: str | None = None) -> builtins.list[Obj]:
        """Objects of a resource as they were at resourceVersion `rv` (a consistent snapshot for paginated
        lists), rebuilt by undoing the retained events after `rv`. Gone when `rv` predates the history."""
        if rv < self._dropped_upto.get(key, 0):
            raise GoneError(f"too old resource version: {rv} ({self._dropped_upto[key] + 1})")
        objs = dict(self._objects.get(key, {}))
        for event in reversed(self._history.get(key, deque())):
            if event.rv <= rv:
                break
            at = _ns_name(event.obj)
            if event.type == "ADDED":
                objs.pop(at, None)
            elif event.prev is not None:
                objs[at] = event.prev
        if namespace is None:
            return list(objs.values())
        return [o for (ns, _), o in objs.items() if ns == namespace]

    def count(self, key: str) -> int:
        return len(self._objects.get(key, {}))

    # ------------------------------------------------------------------ writes

    def create(self, key: str, obj: Obj, *, owned: bool = False) -> Obj:
        """Store a new object. With owned=True the caller hands `obj` over (it is stored without the
        defensive deep copy and the caller must not touch it again); bulk population uses it."""
        ns, name = _ns_name(obj)
        if not name:
            raise InvalidError("name is required", [("metadata.name", "Required value")])
        bucket = self._objects.setdefault(key, {})
        if (ns, name) in bucket:
            raise AlreadyExistsError(f'{key} "{name}" already exists')
        if owned:
            new = dict(obj)
            new["metadata"] = dict(obj.get("metadata") or {})
        else:
            new = clone(obj)
        meta = new.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", rfc3339(self._now()))
        meta.setdefault("generation", 1)
        return self._write(key, "ADDED", new)

    def update(self, key: str, obj: Obj, *, check_rv: bool = True) -> Obj:
        """Replace an object. With check_rv and a metadata.resourceVersion set, a stale one is a Conflict."""
        return self._replace(key, clone(obj), check_rv)

    def _replace(self, key: str, new: Obj, check_rv: bool) -> Obj:
        """update with `new` handed over (a copy no one else holds)."""
        ns, name = _ns_name(new)
        old = self.get(key, ns, name)
        meta = new.setdefault("metadata", {})
        sent_rv = meta.get("resourceVersion")
        if check_rv and sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise ConflictError(
                f'Operation cannot be fulfilled on {key} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
        for k in ("uid", "creationTimestamp"):
            meta[k] = old["metadata"].get(k)
        gen = old["metadata"].get("generation", 1)
        meta["generation"] = gen + 1 if new.get("spec") != old.get("spec") else gen
        if released(new, key):
            return self.delete(key, ns, name)
        return self._write(key, "MODIFIED", new, prev=old)

    def mutate(self, key: str, namespace: str, name: str, fn: Callable[[Obj], None]) -> Obj:
        """Controllers' read-modify-write: fn edits a deep copy, which is then stored (never a Conflict)."""
        new = clone(self.get(key, namespace, name))
        fn(new)
        return self._replace(key, new, check_rv=False)

    def set_field(self, key: str, namespace: str, name: str, field: str, value: Any) -> Obj:
        """A controller's write of one top-level field (a status), `value` handed over (a copy no one
        else holds). The new version shares the object's other fields with the one before instead of
        copying them: stored objects are never edited in place (every edit is of a copy, as mutate's),
        so sharing is safe, and a Job's pod template is not copied for each status change."""
        old = self.get(key, namespace, name)
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        new[field] = value
        return self._replace(key, new, check_rv=False)

    def request_delete(self, key: str, namespace: str, name: str, grace: int = 0) -> tuple[Obj, bool]:
        """A DELETE as the registry serves it; returns the object and whether it is gone.

        With finalizers or a grace period above zero the object is only marked: deletionTimestamp =
        now + grace and deletionGracePeriodSeconds = grace (a later request may shorten both, never
        lengthen them). Without either it is removed now."""
        old = self.get(key, namespace, name)
        meta = old["metadata"]
        grace = max(0, int(grace))
        if not meta.get("finalizers") and grace == 0:
            return self.delete(key, namespace, name), True
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and current is not None and int(current) <= grace:
            return old, False
        if meta.get("deletionTimestamp") and current is None:
            return old, False
        now = self._now()

        def mark(o: Obj) -> None:
            o["metadata"]["deletionTimestamp"] = rfc3339(now + grace)
            o["metadata"]["deletionGracePeriodSeconds"] = grace

        new = self.mutate(key, namespace, name, mark)
        return new, self.find(key, namespace, name) is None

    def namespace_has_content(self, namespace: str) -> bool:
        """Whether any namespaced object (of any resource) lives in `namespace`."""
        return any(ns == namespace for bucket in self._objects.values() for ns, _ in bucket)

    def delete(self, key: str, namespace: str, name: str) -> Obj:
        """Remove an object now, whatever its finalizers (a force delete)."""
        old = self.get(key, namespace, name)
        del self._objects[key][(namespace, name)]
        gone = copy.copy(old)
        gone["metadata"] = dict(old["metadata"])
        return self._write(key, "DELETED", gone, store=False, prev=old)

    def _write(self, key: str, etype: str, obj: Obj, store: bool = True, prev: Obj | None = None) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        if store:
            self._objects.setdefault(key, {})[_ns_name(obj)] = obj
        event = WatchEvent(etype, key, obj, self._rv, prev)
        hist = self._history.get(key)
        if hist is None:
            hist = self._history[key] = deque()
        hist.append(event)
        if len(hist) > self._history_len:
            self._dropped_upto[key] = hist.popleft().rv
        for listener in tuple(self._listeners.get(key, ())):
            listener(event)
        return obj

    # ------------------------------------------------------------------ watch

    def events_since(self, key: str, rv: int) -> builtins.list[WatchEvent]:
        """Events of a resource with resourceVersion > rv. Gone when rv predates the retained window."""
        if rv < self._dropped_upto.get(key, 0):
            raise GoneError(f"too old resource version: {rv} ({self._dropped_upto[key] + 1})")
        hist = self._history.get(key, deque())
        if not hist or hist[-1].rv <= rv:
            return []
        return [e for e in hist if e.rv > rv]

    def compact(self, key: str, keep: int = 0) -> None:
        """Drop all but the last `keep` events of a resource (tests use it to force 410 Gone)."""
        hist = self._history.get(key)
        while hist and len(hist) > keep:
            self._dropped_upto[key] = hist.popleft().rv
        if not hist:
            self._dropped_upto[key] = self._rv

    def subscribe(self, key: str, listener: Listener) -> Callable[[], None]:
        """Call listener after every write of resource `key`; returns the unsubscribe function."""
        self._listeners.setdefault(key, []).append(listener)

        def unsubscribe() -> None:
            listeners = self._listeners.get(key, [])
            if listener in listeners:
                listeners.remove(listener)

        return unsubscribe
