"""The resource quota controller: keeps every ResourceQuota's status.used up to date as objects change.

Owns `QuotaController`: namespaces with a ResourceQuota whose pods (a pod finishing frees its quota) or other
counted objects were written are marked dirty by store listeners; `tick()` recomputes their quotas with
kubesim.admission.refresh_quotas, writing only what changed. (The API refreshes usage at each create and
delete too, as the admission plugin charges it at once.)
"""

from __future__ import annotations

from kubesim.admission import QUOTA_KEY, refresh_quotas
from kubesim.resources import RESOURCES
from kubesim.store import ObjectStore, WatchEvent


class QuotaController:
    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._dirty: set[str] = {q["metadata"].get("namespace", "") for q in store.list(QUOTA_KEY)[0]}
        for r in RESOURCES:
            if r.namespaced and r.key not in (QUOTA_KEY, "events"):
                store.subscribe(r.key, self._on_write)
        store.subscribe(QUOTA_KEY, self._on_quota)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def _on_write(self, event: WatchEvent) -> None:
        if self._store.count(QUOTA_KEY):
            self._dirty.add(event.obj["metadata"].get("namespace", ""))

    def _on_quota(self, event: WatchEvent) -> None:
        prev = event.prev
        if event.type != "DELETED" and (prev is None or prev.get("spec") != event.obj.get("spec")):
            self._dirty.add(event.obj["metadata"].get("namespace", ""))

    def tick(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for ns in sorted(dirty):
            refresh_quotas(self._store, ns)
