"""Pod churn for load tests: GPU pods bound to nodes, replaced at a steady rate on the simulation loop.

    churn_pod(name, node, gpus, written_at)   a Running pod bound to a node (no scheduler involved), its
                                              write time (epoch seconds) in the annotation WRITTEN_AT so a
                                              watcher can measure write -> observed latency
    PodChurn                                  a round robin over the clusters' stores: each step deletes a
                                              cluster's oldest churn pod and creates a fresh one on the same
                                              node (two watch events: pods finishing and starting);
                                              populate() binds P pods to every GPU node; run() paces
                                              steps to a rate in events/s from a task on the loop, yielding
                                              to the loop between ticks so watches keep streaming

Everything here runs on the simulation's event loop (stores are not thread-safe): call populate and
step through Simulation.call, and schedule run() with asyncio.run_coroutine_threadsafe(..., sim.loop).
Objects are built fresh and handed to the store with create(owned=True), so a step costs no deep copy.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from kubesim.store import Obj, ObjectStore

WRITTEN_AT = "sim.gpufed.io/written-at"
GPU = "nvidia.com/gpu"


def churn_pod(
    name: str, node: str, gpus: int = 1, written_at: float = 0.0, namespace: str = "default"
) -> Obj:
    """A Running pod bound to `node` asking for `gpus` whole GPUs and one CPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"sim.gpufed.io/churn": "true"},
            "annotations": {WRITTEN_AT: repr(written_at)},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "none",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "resources": {"requests": {GPU: str(gpus), "cpu": "1"}, "limits": {GPU: str(gpus)}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


@dataclass
class ChurnStats:
    steps: int = 0
    events: int = 0


class PodChurn:
    """Replace pods round-robin across clusters; see the module docstring."""

    def __init__(self, stores: Mapping[str, ObjectStore], namespace: str = "default") -> None:
        if not stores:
            raise ValueError("stores: at least one cluster is needed")
        self._stores = dict(stores)
        self._names = sorted(self._stores)
        self._namespace = namespace
        self._rings: dict[str, deque[tuple[str, str]]] = {c: deque() for c in self._names}
        self._serial = 0
        self._next = 0
        self.stats = ChurnStats()

    def populate(self, pods_per_node: int, gpus_per_pod: int = 1) -> int:
        """Bind `pods_per_node` churn pods to every node with GPUs; returns how many were created."""
        created = 0
        for c in self._names:
            store = self._stores[c]
            nodes, _ = store.list("nodes")
            for n in sorted(nodes, key=lambda o: o["metadata"]["name"]):
                if GPU not in ((n.get("status") or {}).get("allocatable") or {}):
                    continue
                node = n["metadata"]["name"]
                for i in range(pods_per_node):
                    name = f"{node}-p{i}"
                    store.create(
                        "pods", churn_pod(name, node, gpus_per_pod, 0.0, self._namespace), owned=True
                    )
                    self._rings[c].append((name, node))
                    created += 1
        return created

    def step(self, replacements: int, now: float | None = None) -> int:
        """Replace `replacements` pods (next clusters in turn); returns the watch events written."""
        stamp = time.time() if now is None else now
        events = 0
        for _ in range(replacements):
            c = self._names[self._next]
            self._next = (self._next + 1) % len(self._names)
            ring = self._rings[c]
            if not ring:
                continue
            store = self._stores[c]
            old, node = ring.popleft()
            store.delete("pods", self._namespace, old)
            self._serial += 1
            name = f"{node}-c{self._serial}"
            store.create("pods", churn_pod(name, node, 1, stamp, self._namespace), owned=True)
            ring.append((name, node))
            events += 2
        self.stats.steps += replacements
        self.stats.events += events
        return events

    async def run(self, rate: float, seconds: float, tick: float = 0.01) -> int:
        """Offer about `rate` events/s for `seconds`; returns the events written (fewer if the loop can't)."""
        if rate <= 0 or seconds <= 0:
            raise ValueError("rate and seconds must be positive")
        start = time.monotonic()
        end = start + seconds
        written = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = int(rate * (now - start)) - written
            if due >= 2:
                written += self.step(due // 2)
            await asyncio.sleep(tick)
        return written
