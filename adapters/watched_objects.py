"""What a ClusterWatcher keeps of a cluster's objects between events, trimmed for memory.

Owns the trimming of nodes and NodeResourceTopologies to the fields capacity reads (memory at 100k
nodes), a pod's interned effective requests, and DraState: the gpu.nvidia.com ResourceSlices by node and
the devices allocated claims hold (a node with GPU slices gets its GPU facts from them, broker/dra.merge).
"""

from __future__ import annotations

import sys
from typing import Any

from adapters.kube_informer import BAD_OBJECT
from adapters.kube_rest import Obj
from broker.capacity import dra, kube_objects


def trim_node(node: Obj) -> Obj:
    """Keep what capacity reads of a node (drops images, nodeInfo, managedFields: memory at 100k nodes)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "labels": _interned(meta.get("labels"))},
        "spec": node.get("spec") or {},
        "status": {
            "allocatable": _interned(status.get("allocatable")),
            "conditions": [_condition(c) for c in status.get("conditions") or [] if _kept_condition(c)],
        },
    }


# The kubelet's own conditions other than Ready say nothing capacity or GPU health reads; the rest (set
# by health agents: NVSentinel, node-problem-detector rules) are kept for broker.health.node_signals.
_KUBELET_CONDITIONS = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})


def _kept_condition(c: Any) -> bool:
    return isinstance(c, dict) and c.get("type") not in _KUBELET_CONDITIONS


def _condition(c: dict[str, Any]) -> dict[str, Any]:
    if c.get("type") == "Ready":
        return {"type": "Ready", "status": c.get("status")}
    return {k: c.get(k) for k in ("type", "status", "reason", "message") if c.get(k) is not None}


def _interned(mapping: Any) -> Any:
    """A str->str mapping with its strings interned: 1,000 nodes of a pool share their label strings."""
    if not isinstance(mapping, dict):
        return mapping or {}
    return {
        sys.intern(k) if isinstance(k, str) else k: sys.intern(v) if isinstance(v, str) else v
        for k, v in mapping.items()
    }


_NRT_RESOURCES = frozenset((kube_objects.GPU, "cpu"))


def trim_nrt(nrt: Obj) -> Obj:
    """Keep what capacity reads of a NodeResourceTopology: policy attributes and the Node zones' GPU/cpu."""
    zones = []
    for z in nrt.get("zones") or []:
        if not isinstance(z, dict) or z.get("type") != "Node":
            continue
        resources = [
            r for r in z.get("resources") or [] if isinstance(r, dict) and r.get("name") in _NRT_RESOURCES
        ]
        zones.append({"name": z.get("name"), "type": "Node", "resources": resources})
    out: Obj = {"metadata": {"name": (nrt.get("metadata") or {}).get("name")}, "zones": zones}
    for key in ("attributes", "topologyPolicies"):
        if key in nrt:
            out[key] = nrt[key]
    return out


Requests = tuple[tuple[str, int], ...]  # a pod's non-zero effective requests, sorted, interned


def add_requests(into: dict[str, int], req: Requests, sign: int) -> None:
    for k, v in req:
        n = into.get(k, 0) + sign * v
        if n:
            into[k] = n
        else:
            into.pop(k, None)


class DraState:
    """A cluster's gpu.nvidia.com ResourceSlices by node and the devices its allocated claims hold.

    replace/apply return the nodes whose facts must be recomputed (the node of each touched slice, the
    node of each pool a changed claim allocates from)."""

    def __init__(self) -> None:
        self._slice_node: dict[str, str] = {}  # slice name -> its node (driver gpu.nvidia.com only)
        # parsed once per slice version; a slice that can't be parsed is kept raw, so that merging it
        # raises again and the node is reported bad with the slice's field
        self._by_node: dict[str, dict[str, Obj | dra.ParsedSlice]] = {}
        self._pool_node: dict[str, str] = {}
        self._claims: dict[str, frozenset[dra.DeviceKey]] = {}  # "ns/name" -> devices
        self.used: frozenset[dra.DeviceKey] = frozenset()

    def slices_of(self, node: str) -> list[Obj | dra.ParsedSlice]:
        return list(self._by_node.get(node, {}).values())

    def _put_slice(self, obj: Obj, deleted: bool) -> set[str]:
        name = str((obj.get("metadata") or {}).get("name"))
        touched: set[str] = set()
        old = self._slice_node.pop(name, None)
        if old is not None:
            self._by_node.get(old, {}).pop(name, None)
            touched.add(old)
        spec = obj.get("spec") or {}
        if deleted or spec.get("driver") != dra.DRIVER or not spec.get("nodeName"):
            return touched
        node = str(spec["nodeName"])
        self._slice_node[name] = node
        parsed: Obj | dra.ParsedSlice
        try:
            parsed = dra.parse_slice(obj)
        except BAD_OBJECT:
            parsed = obj
        self._by_node.setdefault(node, {})[name] = parsed
        self._pool_node[str((spec.get("pool") or {}).get("name", ""))] = node
        touched.add(node)
        return touched

    def _put_claim(self, obj: Obj, deleted: bool) -> set[str]:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        old = self._claims.pop(key, frozenset())
        new = frozenset() if deleted else dra.used_devices([obj])
        new = frozenset(d for d in new if d[0] == dra.DRIVER)
        if new:
            self._claims[key] = new
        return {self._pool_node.get(pool, "") for _drv, pool, _dev in old ^ new}

    def _recount(self) -> None:
        self.used = frozenset(d for devices in self._claims.values() for d in devices)

    def replace(self, resource: str, items: list[Obj]) -> set[str]:
        touched: set[str] = set()
        if resource == "resourceslices":
            touched.update(self._by_node)
            self._slice_node, self._by_node, self._pool_node = {}, {}, {}
            for s in items:
                touched |= self._put_slice(s, False)
        else:
            touched.update(self._pool_node.get(p, "") for c in self._claims.values() for _d, p, _v in c)
            self._claims = {}
            for c in items:
                touched |= self._put_claim(c, False)
            self._recount()
        touched.discard("")
        return touched

    def apply(self, resource: str, event_type: str, obj: Obj) -> set[str]:
        deleted = event_type == "DELETED"
        if resource == "resourceslices":
            touched = self._put_slice(obj, deleted)
        else:
            touched = self._put_claim(obj, deleted)
            self._recount()
        touched.discard("")
        return touched
