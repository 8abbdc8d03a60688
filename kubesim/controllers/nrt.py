"""Keeps NodeResourceTopology objects current: each zone's `available` follows the pods bound in it.

Owns `TopologyUpdater`, the simulator's nfd-topology-updater: for every node whose zone usage changed
(Accounting.dirty_topology), it rewrites the node's NRT zones with available = allocatable minus the
exclusive resources of the pods the scheduler placed in that zone (devices; cpu/memory of Guaranteed pods).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib

from kubesim.controllers.accounting import NRT, Accounting
from kubesim.quantity import format_quantity, parse_quantity
from kubesim.store import NotFoundError, Obj, ObjectStore


class TopologyUpdater:
    def __init__(self, store: ObjectStore, accounting: Accounting) -> None:
        self._store = store
        self._acct = accounting

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
        out = []
        for zone in nrt.get("zones") or ():
            used = self._acct.zone_used(node, zone.get("name", ""))
            resources = []
            for res in zone.get("resources") or ():
                name = res["name"]
                available = parse_quantity(res.get("allocatable", "0")) - used.get(name, 0.0)
                resources.append({**res, "available": format_quantity(max(available, 0.0), name)})
            out.append({**zone, "resources": resources})
        return out


def _fingerprint(pods: set[tuple[str, str]]) -> str:
    digest = hashlib.sha256("\n".join(f"{ns}/{n}" for ns, n in sorted(pods)).encode()).hexdigest()
    return "pfp0v001" + digest[:16]


def _apply(obj: Obj, zones: list[Obj], fingerprint: str) -> None:
    obj["zones"] = zones
    attrs = [a for a in obj.get("attributes") or () if a.get("name") != "nodeTopologyPodsFingerprint"]
    attrs.append({"name": "nodeTopologyPodsFingerprint", "value": fingerprint})
    obj["attributes"] = attrs
