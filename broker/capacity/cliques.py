"""NVLink cliques in the capacity roll-up: nodes -> CliqueCapacity per (product, clique).

Owns which node counts towards which clique (the GFD `nvidia.com/gpu.clique` label on a node that takes
the broker's whole-GPU pods) and the running aggregate behind CliqueCapacity, kept incrementally by
broker.capacity.index (add / remove one node's part) and built in one pass by rollup.summarize: both
through `CliqueIndex`, so the two agree by construction. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.capacity import rollup
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


def clique_part(node: NodeFacts, tolerated: frozenset[str]) -> CliquePart | None:
    """The node's part of its clique, None when it has no clique label or takes no whole-GPU pods."""
    clique = node.labels.get(CLIQUE_LABEL, "").strip()
    if not clique or node.product is None or not rollup.takes_whole_gpus(node, tolerated):
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
                nodes_by_free=rollup.histogram(agg.frees),
            )
            for (product, clique), agg in sorted(self._aggs.items())
        )


def summarize_cliques(nodes: Iterable[NodeFacts], tolerated: frozenset[str]) -> tuple[CliqueCapacity, ...]:
    """The cliques of a set of nodes in one pass (what the index keeps incrementally)."""
    index = CliqueIndex()
    for node in nodes:
        index.add(clique_part(node, tolerated), 1)
    return index.cliques()
