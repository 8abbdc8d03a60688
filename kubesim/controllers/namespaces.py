"""The namespace controller: a Terminating namespace is emptied, then removed.

Owns `NamespaceController`. The API server marks a namespace that still has content with
deletionTimestamp and status.phase Terminating (and refuses new content in it). This controller deletes
every namespaced object in it (pods with their grace period when running, everything else at once;
finalizers hold what they hold), writes the real controller's status conditions
(NamespaceDeletionDiscoveryFailure, NamespaceDeletionGroupVersionParsingFailure,
NamespaceDeletionContentFailure, NamespaceContentRemaining "Some resources are remaining: pods has 2
resource instances", NamespaceFinalizersRemaining "Some content in the namespace has finalizers
remaining: batch.kubernetes.io/job-tracking in 2 resource instances"), and once nothing is left removes
the `kubernetes` entry of spec.finalizers and the namespace itself (or leaves it to its own
metadata.finalizers).
"""

from __future__ import annotations

import contextlib
from collections import Counter

from kubesim.clock import SimClock
from kubesim.controllers.pods import is_terminal, key_of, node_name, set_condition
from kubesim.resources import RESOURCES
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent

_NAMESPACED = tuple(r for r in RESOURCES if r.namespaced)


class NamespaceController:
    def __init__(self, store: ObjectStore, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._terminating: set[str] = {
            ns["metadata"]["name"]
            for ns in store.list("namespaces")[0]
            if ns["metadata"].get("deletionTimestamp")
        }
        self._dirty = bool(self._terminating)
        store.subscribe("namespaces", self._on_namespace)
        for r in _NAMESPACED:
            store.subscribe(r.key, self._on_content)

    @property
    def dirty(self) -> bool:
        return self._dirty

    def _on_namespace(self, event: WatchEvent) -> None:
        name = event.obj["metadata"]["name"]
        if event.type != "DELETED" and event.obj["metadata"].get("deletionTimestamp"):
            if name not in self._terminating:
                self._terminating.add(name)
                self._dirty = True
        else:
            self._terminating.discard(name)

    def _on_content(self, event: WatchEvent) -> None:
        if (event.obj["metadata"].get("namespace") or "") in self._terminating:
            self._dirty = True

    def tick(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        for name in sorted(self._terminating):
            ns = self._store.find("namespaces", "", name)
            if ns is not None:
                self._empty(ns)

    def _empty(self, ns: Obj) -> None:
        name = ns["metadata"]["name"]
        remaining: Counter[str] = Counter()
        finalizers: Counter[str] = Counter()
        for r in _NAMESPACED:
            for obj in self._store.list(r.key, name)[0]:
                if not obj["metadata"].get("deletionTimestamp"):
                    grace = 0
                    if r.key == "pods" and node_name(obj) and not is_terminal(obj):
                        grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                    with contextlib.suppress(NotFoundError):
                        _, gone = self._store.request_delete(r.key, name, obj["metadata"]["name"], grace)
                        if gone:
                            continue
                current = self._store.find(r.key, *key_of(obj))
                if current is None:
                    continue
                remaining[r.key] += 1
                for f in current["metadata"].get("finalizers") or ():
                    finalizers[f] += 1
        if remaining:
            self._write_conditions(ns, remaining, finalizers)
            return
        spec_finalizers = [f for f in (ns.get("spec") or {}).get("finalizers") or () if f != "kubernetes"]
        if not ns["metadata"].get("finalizers"):
            with contextlib.suppress(NotFoundError):
                self._store.delete("namespaces", "", name)
            return

        def finalize(o: Obj) -> None:
            o.setdefault("spec", {})["finalizers"] = spec_finalizers
            if not spec_finalizers:
                o["spec"].pop("finalizers")

        self._store.mutate("namespaces", "", name, finalize)

    def _write_conditions(self, ns: Obj, remaining: Counter[str], finalizers: Counter[str]) -> None:
        now = self._clock.now()
        left = ", ".join(f"{res} has {n} resource instances" for res, n in sorted(remaining.items()))
        held = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(finalizers.items()))

        def fn(o: Obj) -> None:
            set_condition(
                o,
                "NamespaceDeletionDiscoveryFailure",
                "False",
                now,
                "ResourcesDiscovered",
                "All resources successfully discovered",
            )
            set_condition(
                o,
                "NamespaceDeletionGroupVersionParsingFailure",
                "False",
                now,
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            )
            set_condition(
                o,
                "NamespaceDeletionContentFailure",
                "False",
                now,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            )
            set_condition(
                o,
                "NamespaceContentRemaining",
                "True",
                now,
                "SomeResourcesRemain",
                f"Some resources are remaining: {left}",
            )
            if finalizers:
                set_condition(
                    o,
                    "NamespaceFinalizersRemaining",
                    "True",
                    now,
                    "SomeFinalizersRemain",
                    f"Some content in the namespace has finalizers remaining: {held}",
                )
            else:
                set_condition(
                    o,
                    "NamespaceFinalizersRemaining",
                    "False",
                    now,
                    "ContentHasNoFinalizers",
                    "All content-preserving finalizers finished",
                )

        probe = {"status": dict(ns.get("status") or {})}
        probe["status"]["conditions"] = [dict(c) for c in probe["status"].get("conditions") or ()]
        fn(probe)
        if probe["status"] != (ns.get("status") or {}):
            self._store.mutate("namespaces", "", ns["metadata"]["name"], fn)
