"""NVLink cliques in the capacity roll-up: free nodes and GPUs per clique, incremental = one pass."""

from __future__ import annotations

import dataclasses

from broker.capacity.index import CapacityIndex
from broker.core import catalog
from broker.core.model import ClusterTraits, Health
from broker.core.topology import CliqueCapacity
from tests.unit.topology_builders import clique_id, cluster, gb200, rack


def test_gb200_and_gb300_are_in_the_catalog() -> None:
    assert catalog.normalise_product("NVIDIA-GB200").name == "GB200"
    assert catalog.normalise_product("NVIDIA-GB300").name == "GB300"
    assert catalog.normalise_product("NVIDIA-GB200").family == "blackwell"


def test_each_clique_counts_its_free_nodes_and_gpus() -> None:
    s = cluster("a", rack("a", 1, free_nodes=6, busy_nodes=12), rack("a", 2, free_nodes=3))
    assert s.cliques == (
        CliqueCapacity(
            clique_id(1), "GB200", nodes=18, free_nodes=6, free=24, nodes_by_free=(12, 0, 0, 0, 6)
        ),
        CliqueCapacity(clique_id(2), "GB200", nodes=3, free_nodes=3, free=12, nodes_by_free=(0, 0, 0, 0, 3)),
    )


def test_nodes_without_the_label_or_not_taking_pods_are_in_no_clique() -> None:
    nodes = [
        gb200("x-unlabelled", None),
        gb200("x-cordoned", 1, cordoned=True),
        gb200("x-half", 1, allocated=2),
    ]
    s = cluster("x", nodes)
    assert s.cliques == (
        CliqueCapacity(clique_id(1), "GB200", nodes=1, free_nodes=0, free=2, nodes_by_free=(0, 0, 1)),
    )


def test_the_index_keeps_the_cliques_as_summarize_does() -> None:
    nodes = rack("a", 1, free_nodes=4, busy_nodes=2) + rack("a", 2, free_nodes=2)
    index = CapacityIndex("a")
    for n in nodes:
        index.upsert(n)
    traits = ClusterTraits("a")
    assert index.summary(traits, Health.HEALTHY, 1000.0).cliques == cluster("a", nodes).cliques
    # a node fills up, another leaves: the clique follows, and an emptied clique disappears
    index.upsert(dataclasses.replace(nodes[0], gpus_allocated=4))
    for n in rack("a", 2, free_nodes=2):
        index.remove(n.name)
    changed = [dataclasses.replace(nodes[0], gpus_allocated=4), *nodes[1:6]]
    assert index.summary(traits, Health.HEALTHY, 1000.0).cliques == cluster("a", changed).cliques
    assert [c.clique for c in index.summary(traits, Health.HEALTHY, 1000.0).cliques] == [clique_id(1)]
