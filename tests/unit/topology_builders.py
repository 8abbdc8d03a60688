"""GB200 NVL72 nodes and clusters for the NVLink clique tests (NodeFacts, as the pollers make them)."""

from __future__ import annotations

from broker.capacity import rollup
from broker.core import catalog
from broker.core.k8s_names import L_PRODUCT
from broker.core.model import ClusterSnapshot, ClusterSummary, ClusterTraits, Health, NodeFacts
from broker.core.topology import CLIQUE_LABEL

GB200 = "NVIDIA-GB200"
UUID = "7f3c2a9e-0000-4000-8000-00000000abcd"


def clique_id(n: int) -> str:
    return f"{UUID}.{n}"


def gb200(name: str, clique: int | None, allocated: int = 0, *, cordoned: bool = False) -> NodeFacts:
    labels = {L_PRODUCT: GB200}
    if clique is not None:
        labels[CLIQUE_LABEL] = clique_id(clique)
    return NodeFacts(
        name=name,
        product=catalog.normalise_product(GB200),
        gpu_count=4,
        gpus_allocatable=4,
        gpus_allocated=allocated,
        labels=labels,
        unschedulable=cordoned,
    )


def rack(cluster: str, clique: int, free_nodes: int, busy_nodes: int = 0) -> list[NodeFacts]:
    """`free_nodes` idle GB200 nodes and `busy_nodes` full ones in one clique."""
    return [gb200(f"{cluster}-r{clique}-n{i:02d}", clique) for i in range(free_nodes)] + [
        gb200(f"{cluster}-r{clique}-b{i:02d}", clique, allocated=4) for i in range(busy_nodes)
    ]


def cluster(name: str, *racks: list[NodeFacts], now: float = 1000.0) -> ClusterSummary:
    nodes = tuple(sorted((n for r in racks for n in r), key=lambda n: n.name))
    return rollup.summarize(ClusterSnapshot(name, nodes), ClusterTraits(name), Health.HEALTHY, now)
