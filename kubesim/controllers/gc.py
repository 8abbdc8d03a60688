"""Garbage collection: dependents of deleted owners, pods of deleted nodes, old events.

Owns `GarbageCollector`:
- owner references: when any object is deleted, objects whose metadata.ownerReferences name its uid
  are deleted (pods and Workloads of a deleted Job, the NRT of a deleted Node), cascading, with grace
  period 0 and honouring finalizers (a dependent with finalizers is only marked for deletion).
- pod GC: a pod bound to a node that no longer exists is marked Failed with condition
  DisruptionTarget reason DeletionByPodGC (so its Job counts it and replaces it).
- events older than an hour (EVENT_TTL_SECONDS) are removed, checked once a simulated minute.
"""

from __future__ import annotations

import contextlib

from kubesim.clock import SimClock
from kubesim.controllers.events import EVENT_TTL_SECONDS, EVENTS
from kubesim.controllers.pods import is_terminal, key_of, node_name, set_condition
from kubesim.resources import RESOURCES
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent

_PRUNE_EVERY = 60.0


class GarbageCollector:
    def __init__(self, store: ObjectStore, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}  # owner uid -> (key, ns, name)
        self._deleted_owners: list[str] = []
        self._deleted_nodes: list[str] = []
        self._next_prune = clock.now() + _PRUNE_EVERY
        for r in RESOURCES:
            if r.key == EVENTS:
                continue
            for obj in store.list(r.key)[0]:
                self._index(r.key, obj)
            store.subscribe(r.key, self._on_write)

    @property
    def dirty(self) -> bool:
        return bool(self._deleted_owners or self._deleted_nodes)

    @property
    def next_due(self) -> float:
        return self._next_prune

    def _index(self, key: str, obj: Obj) -> None:
        ns, name = key_of(obj)
        for ref in obj["metadata"].get("ownerReferences") or ():
            self._dependents.setdefault(ref.get("uid", ""), set()).add((key, ns, name))

    def _on_write(self, event: WatchEvent) -> None:
        obj = event.obj
        if event.type == "DELETED":
            ns, name = key_of(obj)
            for ref in obj["metadata"].get("ownerReferences") or ():
                deps = self._dependents.get(ref.get("uid", ""))
                if deps is not None:
                    deps.discard((event.key, ns, name))
            uid = obj["metadata"].get("uid", "")
            if uid in self._dependents:
                self._deleted_owners.append(uid)
            if event.key == "nodes":
                self._deleted_nodes.append(name)
            return
        if obj["metadata"].get("ownerReferences"):
            self._index(event.key, obj)

    def tick(self) -> None:
        while self._deleted_owners:
            uid = self._deleted_owners.pop()
            for key, ns, name in sorted(self._dependents.pop(uid, set())):
                current = self._store.find(key, ns, name)
                if current is None:
                    continue
                if any(r.get("uid") == uid for r in current["metadata"].get("ownerReferences") or ()):
                    with contextlib.suppress(NotFoundError):
                        self._store.request_delete(key, ns, name, 0)
        if self._deleted_nodes:
            gone, self._deleted_nodes = set(self._deleted_nodes), []
            self._fail_orphans(gone)
        now = self._clock.now()
        if now >= self._next_prune:
            self._next_prune = now + _PRUNE_EVERY
            self._prune_events(now)

    def _fail_orphans(self, nodes: set[str]) -> None:
        now = self._clock.now()
        for pod in self._store.list("pods")[0]:
            if (
                node_name(pod) not in nodes
                or is_terminal(pod)
                or self._store.find("nodes", "", node_name(pod))
            ):
                continue

            def fail(obj: Obj) -> None:
                obj.setdefault("status", {})["phase"] = "Failed"
                set_condition(
                    obj, "DisruptionTarget", "True", now, "DeletionByPodGC", "PodGC: node no longer exists"
                )
                set_condition(obj, "Ready", "False", now, "PodFailed")

            self._store.mutate("pods", *key_of(pod), fail)

    def _prune_events(self, now: float) -> None:
        from kubesim.controllers.jobs import _epoch

        cutoff = now - EVENT_TTL_SECONDS
        for ev in self._store.list(EVENTS)[0]:
            last = ev.get("lastTimestamp") or ev["metadata"].get("creationTimestamp") or ""
            if _epoch(last, now) < cutoff:
                with contextlib.suppress(NotFoundError):
                    self._store.delete(EVENTS, *key_of(ev))
