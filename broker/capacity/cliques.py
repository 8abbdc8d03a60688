"""NVLink cliques in the capacity roll-up: nodes -> CliqueCapacity per (product, clique).

Owns which node counts towards which clique (the GFD `nvidia.com/gpu.clique` label on a node that takes
the broker's whole-GPU pods) and the running aggregate behind CliqueCapacity, kept incrementally by
broker.capacity.index (add / remove one node's part) and built in one pass by rollup.summarize: both
through `CliqueIndex`, so the two agree by construction. Pure: no I/O, no clock.

The label is the one source on device-plugin and DRA nodes alike: the NVIDIA DRA driver's `gpu.nvidia.com`
devices publish no clique or cluster-UUID attribute (type, uuid, productName, brand, architecture,
versions, PCI/NUMA, addressingMode and, with Fabric Manager partitioning, gpuModuleID/partitionN), and the
driver's ComputeDomains themselves require GFD's `nvidia.com/gpu.clique` label (docs/topology.md). A DRA
node's facts keep its labels (capacity/dra.merge), so its rack counts here like any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.core.model import NodeFacts
from broker.core.topology import CLIQUE_LABEL, CliqueCapacity

__all__ = ["CliqueIndex", "CliquePart", "clique_part", "summarize_cliques"]

CliqueKey = tuple[str, str]  # (product, clique label value)


@dataclass(frozen=True, slots=True)
class CliquePart:
    """What one node adds to its clique: its free GPUs, and whether all of them are free."""

    key: CliqueKey
    free: int
    whole: bool


def clique_part(node: NodeFacts, usable: bool) -> CliquePart | None:
    """The node's part of its clique, None when it has no clique label or is not `usable` (it takes no
    whole-GPU pods of the broker: rollup.takes_whole_gpus, which the callers apply)."""
    clique = node.labels.get(CLIQUE_LABEL, "").strip()
    if not clique or node.product is None or not usable:
        return None
    return CliquePart((node.product.name, clique), node.gpus_free, node.gpus_allocated == 0)


@dataclass
class _Agg:
    nodes: int = 0
    free_nodes: int = 0
    free: int = 0
    frees: dict[int, int] = field(default_factory=dict)  # free GPUs on a node -> nodes


class CliqueIndex:
    """Running per-clique aggregates: `add(part, +1 | -1)`, `cliques()` = the summary's tuple."""

    def __init__(self) -> None:
        self._aggs: dict[CliqueKey, _Agg] = {}

    def add(self, part: CliquePart | None, sign: int) -> None:
        if part is None:
            return
        agg = self._aggs.get(part.key)
        if agg is None:
            agg = self._aggs[part.key] = _Agg()
        agg.nodes += sign
        agg.free += sign * part.free
        if part.whole:
            agg.free_nodes += sign
        n = agg.frees.get(part.free, 0) + sign
        if n:
            agg.frees[part.free] = n
        else:
            del agg.frees[part.free]
        if agg.nodes == 0:
            del self._aggs[part.key]

    def cliques(self) -> tuple[CliqueCapacity, ...]:
        """Sorted by (product, clique): O(cliques x histogram width)."""
        return tuple(
            CliqueCapacity(
                clique=clique,
                product=product,
                nodes=agg.nodes,
                free_nodes=agg.free_nodes,
                free=agg.free,
                nodes_by_free=_histogram(agg.frees),
            )
            for (product, clique), agg in sorted(self._aggs.items())
        )


def _histogram(counts: dict[int, int]) -> tuple[int, ...]:
    top = max((v for v, n in counts.items() if n), default=-1)
    return tuple(counts.get(k, 0) for k in range(top + 1))


def summarize_cliques(nodes: Iterable[tuple[NodeFacts, bool]]) -> tuple[CliqueCapacity, ...]:
    """The cliques of (node, usable) pairs in one pass (what the index keeps incrementally)."""
    index = CliqueIndex()
    for node, usable in nodes:
        index.add(clique_part(node, usable), 1)
    return index.cliques()
