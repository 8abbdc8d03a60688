"""What is allocated where: per-node and per-NUMA-zone sums of the effective requests of bound pods.

Owns `Accounting`, kept current by store listeners (O(1) per pod write):
- `used(node)`: effective requests of non-terminated pods bound to the node, plus `pods` (their count).
- NUMA zones of nodes that have a NodeResourceTopology: each zone's allocatable (from the NRT) and what
  bound pods take from it. A pod's zone is recorded on the pod by the scheduler when it binds:
  `sim.gpufed.io/numa-zone: node-1` (the whole pod in one zone) or `sim.gpufed.io/numa-split:
  node-0:nvidia.com/gpu=3;node-1:nvidia.com/gpu=1` (spread, where the node's policy allows it).
  Only exclusive resources count in zones, as NFD counts them: devices always, cpu and memory only
  for Guaranteed pods.
- `dirty_topology`: nodes whose zone usage changed (the NRT controller rewrites their `available`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubesim.controllers.pods import (
    ANN_NUMA_SPLIT,
    ANN_NUMA_ZONE,
    Requests,
    effective_requests,
    is_guaranteed,
    is_terminal,
    key_of,
    node_name,
)
from kubesim.quantity import parse_quantity
from kubesim.store import Obj, ObjectStore, WatchEvent

NRT = "noderesourcetopologies.topology.node.k8s.io"
_NON_DEVICE = ("cpu", "memory", "ephemeral-storage", "pods")


def is_device(resource: str) -> bool:
    return resource not in _NON_DEVICE and not resource.startswith("hugepages-")


def exclusive_requests(pod: Obj, requests: Requests) -> Requests:
    """The part of a pod's requests NUMA zones account for (devices; cpu/memory when Guaranteed)."""
    guaranteed = None
    out: Requests = {}
    for res, amount in requests.items():
        if is_device(res):
            out[res] = amount
        elif res in ("cpu", "memory"):
            if guaranteed is None:
                guaranteed = is_guaranteed(pod)
            if guaranteed:
                out[res] = amount
    return out


def encode_split(split: dict[str, Requests]) -> str:
    return ";".join(
        f"{zone}:" + ",".join(f"{r}={v:g}" for r, v in sorted(res.items()))
        for zone, res in split.items()
        if res
    )


def decode_split(text: str) -> dict[str, Requests]:
    out: dict[str, Requests] = {}
    for part in text.split(";"):
        zone, _, items = part.partition(":")
        if not zone:
            continue
        res: Requests = {}
        for item in items.split(","):
            name, _, value = item.partition("=")
            if name:
                res[name] = float(value)
        out[zone] = res
    return out


@dataclass(slots=True)
class _Contribution:
    node: str
    requests: Requests
    zones: dict[str, Requests] = field(default_factory=dict)


@dataclass(slots=True)
class TopologyInfo:
    """A node's NRT as the scheduler needs it: policy, scope and zone allocatable."""

    policy: str
    scope: str
    zones: dict[str, Requests]


def _add(into: Requests, other: Requests, sign: float) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0.0) + sign * v


class Accounting:
    """Per-node and per-zone allocation of one cluster, fed by pod and NRT writes."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._requests_cache: dict[str, Requests] = {}
        self._by_pod: dict[tuple[str, str], _Contribution] = {}
        self._used: dict[str, Requests] = {}
        self._pods_on: dict[str, set[tuple[str, str]]] = {}
        self._zone_used: dict[str, dict[str, Requests]] = {}
        self.topology: dict[str, TopologyInfo] = {}
        self.dirty_topology: set[str] = set()
        for nrt in store.list(NRT)[0]:
            self._load_topology(nrt)
        for pod in store.list("pods")[0]:
            self._on_pod_obj("ADDED", pod)
        store.subscribe("pods", self._on_pod)
        store.subscribe(NRT, self._on_nrt)

    # ------------------------------------------------------------------ reads

    def requests(self, pod: Obj) -> Requests:
        uid = pod["metadata"].get("uid", "")
        cached = self._requests_cache.get(uid)
        if cached is None:
            cached = effective_requests(pod)
            if uid:
                self._requests_cache[uid] = cached
        return cached

    def used(self, node: str) -> Requests:
        return self._used.get(node, {})

    def pods_on(self, node: str) -> set[tuple[str, str]]:
        return self._pods_on.get(node, set())

    def zone_used(self, node: str, zone: str) -> Requests:
        return self._zone_used.get(node, {}).get(zone, {})

    def zone_free(self, node: str) -> dict[str, Requests]:
        info = self.topology.get(node)
        if info is None:
            return {}
        out: dict[str, Requests] = {}
        for zone, alloc in info.zones.items():
            used = self.zone_used(node, zone)
            out[zone] = {r: a - used.get(r, 0.0) for r, a in alloc.items()}
        return out

    # ------------------------------------------------------------------ listeners

    def _load_topology(self, nrt: Obj) -> None:
        attrs = {a.get("name"): a.get("value") for a in nrt.get("attributes") or ()}
        policies = nrt.get("topologyPolicies") or []
        policy = attrs.get("topologyManagerPolicy")
        scope = attrs.get("topologyManagerScope")
        if policy is None and policies:
            legacy = str(policies[0])
            policy = "single-numa-node" if legacy.startswith("SingleNUMANode") else legacy.lower()
            scope = "pod" if legacy == "SingleNUMANodePodLevel" else "container"
        zones: dict[str, Requests] = {}
        for z in nrt.get("zones") or ():
            if z.get("type", "Node") != "Node":
                continue
            zones[z["name"]] = {
                r["name"]: parse_quantity(r.get("allocatable", "0")) for r in z.get("resources") or ()
            }
        self.topology[nrt["metadata"]["name"]] = TopologyInfo(
            str(policy or "none"), str(scope or "container"), zones
        )

    def _on_nrt(self, event: WatchEvent) -> None:
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            self.topology.pop(name, None)
        else:
            self._load_topology(event.obj)

    def _on_pod(self, event: WatchEvent) -> None:
        self._on_pod_obj(event.type, event.obj)

    def _on_pod_obj(self, etype: str, pod: Obj) -> None:
        key = key_of(pod)
        old = self._by_pod.pop(key, None)
        if old is not None:
            self._remove(key, old)
        node = node_name(pod)
        if etype == "DELETED":
            self._requests_cache.pop(pod["metadata"].get("uid", ""), None)
            return
        if not node or is_terminal(pod):
            if is_terminal(pod):
                self._requests_cache.pop(pod["metadata"].get("uid", ""), None)
            return
        requests = dict(self.requests(pod))
        requests["pods"] = requests.get("pods", 0.0) + 1
        contribution = _Contribution(node, requests)
        annotations = pod["metadata"].get("annotations") or {}
        zone = annotations.get(ANN_NUMA_ZONE)
        if zone:
            contribution.zones = {zone: exclusive_requests(pod, requests)}
        elif annotations.get(ANN_NUMA_SPLIT):
            contribution.zones = decode_split(annotations[ANN_NUMA_SPLIT])
        self._by_pod[key] = contribution
        _add(self._used.setdefault(node, {}), requests, 1)
        self._pods_on.setdefault(node, set()).add(key)
        for z, res in contribution.zones.items():
            _add(self._zone_used.setdefault(node, {}).setdefault(z, {}), res, 1)
        if contribution.zones:
            self.dirty_topology.add(node)

    def _remove(self, key: tuple[str, str], c: _Contribution) -> None:
        _add(self._used.setdefault(c.node, {}), c.requests, -1)
        self._pods_on.get(c.node, set()).discard(key)
        for z, res in c.zones.items():
            _add(self._zone_used.setdefault(c.node, {}).setdefault(z, {}), res, -1)
        if c.zones:
            self.dirty_topology.add(c.node)
