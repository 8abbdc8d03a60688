"""How a fleet's clusters are dealt to poller shards.

PollerSpec      one cluster to watch: name, kubeconfig, context, declared traits (picklable; JSON
                through spec_to_json / spec_from_json)
HashRing        consistent hashing with virtual nodes: which shard owns a cluster; adding a shard
                moves about 1/(n+1) of the clusters, removing a cluster moves none of the others
shard_name      a shard's Ray actor name; shard_of, the shard index that owns a cluster
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from broker.core.model import ClusterTraits, Tier

VIRTUAL_NODES = 64


@dataclass(frozen=True)
class PollerSpec:
    name: str
    kubeconfig: str
    context: str | None
    traits: ClusterTraits
    health: str = ""  # GPU health settings, broker.config.gpu_health.to_json ("": the defaults)


def spec_to_json(spec: PollerSpec) -> dict[str, Any]:
    traits = dataclasses.asdict(spec.traits)
    traits["tier"] = str(spec.traits.tier)
    out = {"name": spec.name, "kubeconfig": spec.kubeconfig, "context": spec.context, "traits": traits}
    return {**out, "health": spec.health} if spec.health else out


def spec_from_json(raw: dict[str, Any]) -> PollerSpec:
    traits = dict(raw["traits"])
    traits["tier"] = Tier(traits["tier"])
    return PollerSpec(
        str(raw["name"]),
        str(raw["kubeconfig"]),
        raw.get("context"),
        ClusterTraits(**traits),
        raw.get("health", ""),
    )


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing: each node at `vnodes` points of a 64-bit ring; a key belongs to the first node
    point at or after its hash. Stable across processes and restarts (blake2b, not Python's hash())."""

    def __init__(self, nodes: Iterable[str], vnodes: int = VIRTUAL_NODES) -> None:
        self.nodes = sorted(set(nodes))
        if not self.nodes:
            raise ValueError("a hash ring needs at least one node")
        points = sorted((_hash(f"{n}#{i}"), n) for n in self.nodes for i in range(vnodes))
        self._keys = [p for p, _ in points]
        self._owners = [n for _, n in points]
        self._owned: dict[str, str] = {}  # key -> owner, as found (the ring never changes)

    def owner(self, key: str) -> str:
        found = self._owned.get(key)
        if found is None:  # hashed once per key: the leader asks for every cluster's shard every pass
            i = bisect.bisect_left(self._keys, _hash(key))
            found = self._owned[key] = self._owners[i % len(self._owners)]
        return found

    def assign(self, keys: Iterable[str]) -> dict[str, list[str]]:
        """Every node with the keys it owns (sorted; nodes that own none map to [])."""
        out: dict[str, list[str]] = {n: [] for n in self.nodes}
        for k in keys:
            out[self.owner(k)].append(k)
        return {n: sorted(v) for n, v in out.items()}

    def assign_specs(self, specs: Iterable[PollerSpec]) -> dict[str, list[PollerSpec]]:
        by_name = {s.name: s for s in specs}
        return {n: [by_name[c] for c in names] for n, names in self.assign(by_name).items()}


def shard_name(prefix: str, index: int) -> str:
    return f"gpufed-poller-{prefix}-{index}"


def shard_of(cluster: str, shards: int) -> int:
    """The index of the shard that owns a cluster among `shards` shards (the ring over their indexes)."""
    ring = HashRing([str(i) for i in range(max(1, shards))])
    return int(ring.owner(cluster))
