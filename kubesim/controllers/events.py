"""core/v1 Events for the simulated cluster: what `kubectl describe` and `kubectl get events` show.

Owns `EventRecorder.record(involved, reason, message, type, component)`: it writes an Event whose
involvedObject points at the object, and, like the real recorder, aggregates repeats of the same
(object, reason, message) into one Event with a growing `count` and a new `lastTimestamp`.
Old events are pruned by the garbage collector (`EVENT_TTL_SECONDS`, one hour like the API server).
"""

from __future__ import annotations

from kubesim.clock import SimClock
from kubesim.store import NotFoundError, Obj, ObjectStore, rfc3339

EVENTS = "events"
EVENT_TTL_SECONDS = 3600.0
_MAX_AGGREGATION_KEYS = 20_000

_API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "Job": "batch/v1",
    "Workload": "kueue.x-k8s.io/v1beta2",
    "PodGroup": "scheduling.x-k8s.io/v1alpha1",
    "ClusterQueue": "kueue.x-k8s.io/v1beta2",
}


class EventRecorder:
    """Writes (and aggregates) Events into one cluster's store."""

    def __init__(self, store: ObjectStore, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._seen: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._serial = 0

    def record(
        self, involved: Obj, reason: str, message: str, type_: str = "Normal", component: str = "kubesim"
    ) -> None:
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        now = self._clock.now()
        ts = rfc3339(now)
        agg_key = (meta.get("uid", ""), reason, message)
        seen = self._seen.get(agg_key)
        if seen is not None:

            def bump(ev: Obj) -> None:
                ev["count"] = int(ev.get("count") or 1) + 1
                ev["lastTimestamp"] = ts

            try:
                self._store.mutate(EVENTS, seen[0], seen[1], bump)
                return
            except NotFoundError:
                del self._seen[agg_key]
        self._serial += 1
        name = f"{meta['name']}.{int(now * 1e9) + self._serial:x}"
        kind = involved.get("kind") or ""
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion") or _API_VERSIONS.get(kind, "v1"),
                "kind": kind,
                "name": meta["name"],
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "eventTime": None,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": "",
        }
        if not meta.get("namespace"):
            event["involvedObject"].pop("namespace")
        self._store.create(EVENTS, event)
        if len(self._seen) >= _MAX_AGGREGATION_KEYS:
            self._seen.clear()
        self._seen[agg_key] = (namespace, name)
