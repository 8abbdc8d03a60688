"""The disruption controller: keeps every PodDisruptionBudget's status up to date as its pods change.

Owns `DisruptionController`: namespaces whose pods or PDB specs changed are marked dirty by store listeners;
`tick()` recomputes their PDBs' status with kubesim.disruption.refresh (expectedPods, currentHealthy,
desiredHealthy, disruptionsAllowed, the DisruptionAllowed condition), writing only what changed.
"""

from __future__ import annotations

from kubesim.clock import SimClock
from kubesim.disruption import PDB_KEY, refresh
from kubesim.store import ObjectStore, WatchEvent


class DisruptionController:
    def __init__(self, store: ObjectStore, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._dirty: set[str] = {p["metadata"].get("namespace", "") for p in store.list(PDB_KEY)[0]}
        store.subscribe("pods", self._on_pod)
        store.subscribe(PDB_KEY, self._on_pdb)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def _on_pod(self, event: WatchEvent) -> None:
        if self._store.count(PDB_KEY):
            self._dirty.add(event.obj["metadata"].get("namespace", ""))

    def _on_pdb(self, event: WatchEvent) -> None:
        prev = event.prev
        if event.type != "DELETED" and (prev is None or prev.get("spec") != event.obj.get("spec")):
            self._dirty.add(event.obj["metadata"].get("namespace", ""))

    def tick(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for ns in sorted(dirty):
            refresh(self._store, ns, self._clock.now())
