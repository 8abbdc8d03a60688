"""Spot interruption of cloud-pool nodes: a notice, then the node is gone.

Owns `SpotInterrupter`. A spot node (labelled `cloud.gpufed.io/spot=true`: every node of a cloud pool with
`spot: true`, or of a node pool given that label) can be interrupted at random (a cloud pool's
`spotInterruptionsPerHour` per node, exponential inter-arrival times on simulated time, from a random
generator seeded by the cluster name so runs repeat) or on demand (`interrupt(node)`, the admin endpoint
`POST /clusters/<name>/spot`, `kubesim fault <cluster> --spot-interrupt <node|pool>`). An interruption:
1. the notice: a Warning event SpotInterrupted "Spot interruption warning was triggered" on the Node (as
   Karpenter reports the cloud's warning), the node cordoned (spec.unschedulable) and annotated
   `sim.gpufed.io/spot-interruption-deadline` with the time it goes;
2. `spotNoticeSeconds` later (default 120, the EC2 two-minute warning) the Node is deleted (event
   RemovingNode "Node <n> event: Removing Node <n> from Controller"); the garbage collector then fails its
   pods with DisruptionTarget reason DeletionByPodGC, so their Jobs replace them elsewhere.
"""

from __future__ import annotations

import contextlib
import heapq
import random

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.fleet import POOL_LABEL, SPOT_KEY, CloudPoolSpec, ClusterSpec
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent, rfc3339

DEADLINE_ANNOTATION = "sim.gpufed.io/spot-interruption-deadline"
SPOT_EVENT = "SpotInterrupted"


class SpotError(ValueError):
    """An on-demand interruption that names no spot node (the admin endpoint answers 400)."""


class SpotInterrupter:
    def __init__(
        self, store: ObjectStore, clock: SimClock, cluster: ClusterSpec, events: EventRecorder
    ) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self._pools: dict[str, CloudPoolSpec] = {p.name: p for p in cluster.cloud_pools if p.spot}
        self._rng = random.Random(f"{cluster.name}/spot")
        self._timers: list[tuple[float, str, str, str]] = []  # (due, kind, node, uid): notice | removal
        self._seen: set[str] = set()
        self.dirty = False
        for node in store.list("nodes")[0]:
            self._track(node)
        store.subscribe("nodes", self._on_node)

    @property
    def next_due(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def _pool_of(self, node: Obj) -> CloudPoolSpec | None:
        """The spot node's pool settings (defaults for a node pool labelled spot), None if not spot."""
        labels = node["metadata"].get("labels") or {}
        if labels.get(SPOT_KEY) != "true":
            return None
        pool = labels.get(POOL_LABEL, "")
        return self._pools.get(pool) or CloudPoolSpec(name=pool or "spot", spot=True)

    def _track(self, node: Obj) -> None:
        uid = node["metadata"].get("uid", "")
        if uid in self._seen:
            return
        pool = self._pool_of(node)
        if pool is None or not pool.spot_interruptions_per_hour:
            return
        self._seen.add(uid)
        due = self._clock.now() + self._rng.expovariate(pool.spot_interruptions_per_hour / 3600.0)
        heapq.heappush(self._timers, (due, "notice", node["metadata"]["name"], uid))

    def _on_node(self, event: WatchEvent) -> None:
        if event.type == "ADDED":
            self._track(event.obj)

    def spot_nodes(self, pool: str | None = None) -> list[str]:
        return sorted(
            n["metadata"]["name"]
            for n in self._store.list("nodes")[0]
            if self._pool_of(n) is not None
            and (pool is None or (n["metadata"].get("labels") or {}).get(POOL_LABEL) == pool)
        )

    def interrupt(self, target: str) -> dict[str, str]:
        """Interrupt a spot node now (by node name, or the first node of a spot pool); returns the node and
        when it goes."""
        node = self._store.find("nodes", "", target)
        if node is None:
            candidates = [
                n
                for n in self.spot_nodes(target)
                if DEADLINE_ANNOTATION
                not in (self._store.get("nodes", "", n)["metadata"].get("annotations") or {})
            ]
            if not candidates:
                raise SpotError(
                    f"{target!r} is neither a spot node nor a spot pool with a node left to interrupt"
                )
            node = self._store.get("nodes", "", candidates[0])
        if self._pool_of(node) is None:
            raise SpotError(f"node {target!r} is not in a spot pool")
        return self._notice(node)

    def _notice(self, node: Obj) -> dict[str, str]:
        name = node["metadata"]["name"]
        existing = (node["metadata"].get("annotations") or {}).get(DEADLINE_ANNOTATION)
        if existing:
            return {"node": name, "deadline": existing}
        pool = self._pool_of(node)
        notice = pool.spot_notice_seconds if pool is not None else 120.0
        due = self._clock.now() + notice
        deadline = rfc3339(due)

        def cordon(o: Obj) -> None:
            o.setdefault("spec", {})["unschedulable"] = True
            o["metadata"].setdefault("annotations", {})[DEADLINE_ANNOTATION] = deadline

        self._store.mutate("nodes", "", name, cordon)
        self._events.record(
            node, SPOT_EVENT, "Spot interruption warning was triggered", "Warning", "karpenter"
        )
        heapq.heappush(self._timers, (due, "removal", name, node["metadata"].get("uid", "")))
        return {"node": name, "deadline": deadline}

    def tick(self) -> None:
        now = self._clock.now()
        while self._timers and self._timers[0][0] <= now:
            _, kind, name, uid = heapq.heappop(self._timers)
            node = self._store.find("nodes", "", name)
            if node is None or node["metadata"].get("uid") != uid:
                continue
            if kind == "notice":
                self._notice(node)
                continue
            with contextlib.suppress(NotFoundError):
                self._store.delete("nodes", "", name)
            self._events.record(
                node,
                "RemovingNode",
                f"Node {name} event: Removing Node {name} from Controller",
                "Normal",
                "node-controller",
            )
