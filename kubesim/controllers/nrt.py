"""Keeps NodeResourceTopology objects current: each zone's `available` follows the pods bound in it.

Owns `TopologyUpdater`, the simulator's nfd-topology-updater: for every node whose zone usage changed
(Accounting.dirty_topology), it rewrites the node's NRT zones with available = allocatable minus the
exclusive resources of the pods the scheduler placed in that zone (devices; cpu/memory of Guaranteed pods).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable

from kubesim.controllers.accounting import NRT, Accounting
from kubesim.quantity import format_quantity, parse_quantity
from kubesim.store import NotFoundError, Obj, ObjectStore

GPU = "nvidia.com/gpu"


class TopologyUpdater:
    def __init__(self, store: ObjectStore, accounting: Accounting) -> None:
        self._store = store
        self._acct = accounting
        # GPU index -> unhealthy, per node (gpuhealth.ClusterGpus.unhealthy): such a GPU leaves its zone's
        # allocatable as it leaves the node's (the kubelet's podresources API no longer lists it)
        self.unhealthy: Callable[[str], set[int]] = lambda _node: set()

    @property
    def dirty(self) -> bool:
        return bool(self._acct.dirty_topology)

    def tick(self) -> None:
        if not self._acct.dirty_topology:
            return
        nodes, self._acct.dirty_topology = self._acct.dirty_topology, set()
        for node in sorted(nodes):
            nrt = self._store.find(NRT, "", node)
            if nrt is None:
                continue
            zones = self._zones(nrt, node)
            if zones != nrt.get("zones"):
                fingerprint = _fingerprint(self._acct.pods_on(node))
                with contextlib.suppress(NotFoundError):
                    self._store.mutate(
                        NRT, "", node, functools.partial(_apply, zones=zones, fingerprint=fingerprint)
                    )

    def _zones(self, nrt: Obj, node: str) -> list[Obj]:
        zones = list(nrt.get("zones") or ())
        bad = self._bad_per_zone(node, zones)
        out = []
        for zone in zones:
            used = self._acct.zone_used(node, zone.get("name", ""))
            resources = []
            for res in zone.get("resources") or ():
                name = res["name"]
                changed = {}
                allocatable = parse_quantity(res.get("allocatable", "0"))
                if name == GPU:  # healthy GPUs only: capacity less the zone's unhealthy ones
                    capacity = parse_quantity(res.get("capacity", res.get("allocatable", "0")))
                    allocatable = capacity - bad.get(zone.get("name", ""), 0)
                    changed["allocatable"] = format_quantity(max(allocatable, 0.0), name)
                available = allocatable - used.get(name, 0.0)
                changed["available"] = format_quantity(max(available, 0.0), name)
                resources.append({**res, **changed})
            out.append({**zone, "resources": resources})
        return out

    def _bad_per_zone(self, node: str, zones: list[Obj]) -> dict[str, int]:
        """Zone name -> its unhealthy GPUs (GPU i is in zone i // (GPUs per zone), as the kubelet sees it)."""
        bad = self.unhealthy(node)
        if not bad or not zones:
            return {}
        total = sum(
            int(parse_quantity(r.get("capacity", "0")))
            for z in zones
            for r in z.get("resources") or ()
            if r["name"] == GPU
        )
        per = max(1, total // len(zones))
        out: dict[str, int] = {}
        for i in bad:
            name = f"node-{i // per}"
            out[name] = out.get(name, 0) + 1
        return out


def _fingerprint(pods: set[tuple[str, str]]) -> str:
    digest = hashlib.sha256("\n".join(f"{ns}/{n}" for ns, n in sorted(pods)).encode()).hexdigest()
    return "pfp0v001" + digest[:16]


def _apply(obj: Obj, zones: list[Obj], fingerprint: str) -> None:
    obj["zones"] = zones
    attrs = [a for a in obj.get("attributes") or () if a.get("name") != "nodeTopologyPodsFingerprint"]
    attrs.append({"name": "nodeTopologyPodsFingerprint", "value": fingerprint})
    obj["attributes"] = attrs
