"""NVLink cliques in the capacity roll-up: free nodes and GPUs per clique, incremental = one pass."""

from __future__ import annotations

import dataclasses

import pytest

from broker.capacity import dra, kube_objects
from broker.capacity.cliques import clique_part
from broker.capacity.index import CapacityIndex
from broker.core import catalog
from broker.core.k8s_names import DRA_DRIVER
from broker.core.model import ClusterTraits, Health, NodeFacts
from broker.core.topology import CLIQUE_LABEL, CliqueCapacity
from kubesim import catalog as sim_catalog
from kubesim.dra import NodeGpus, render_slices
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


# --------------------------------------------------------------------------- where the clique is read

_DRA_NODE = "gb-dra-0"


def _dra_gb200(labels: dict[str, str], allocated: int = 0) -> NodeFacts:
    """A GB200 node whose GPUs the NVIDIA DRA driver publishes (kubesim renders the driver's slices)."""
    node = {
        "metadata": {"name": _DRA_NODE, "labels": {"kubernetes.io/hostname": _DRA_NODE, **labels}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "144", "memory": "1800Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    slices = render_slices(_DRA_NODE, NodeGpus(sim_catalog.GB200, 4))
    used = {(DRA_DRIVER, _DRA_NODE, f"gpu-{i}") for i in range(allocated)}
    return dra.merge(kube_objects.node_facts(node, [], None), slices, frozenset(used))


@pytest.mark.parametrize(
    ("node", "usable", "expected"),
    [
        pytest.param(gb200("gfd", 1), True, (clique_id(1), 4, True), id="device plugin + GFD label"),
        pytest.param(gb200("gfd-half", 2, allocated=3), True, (clique_id(2), 1, False), id="partly used"),
        pytest.param(gb200("gfd-none", None), True, None, id="no label: no clique"),
        pytest.param(gb200("gfd-cordoned", 1), False, None, id="takes no broker pods"),
        pytest.param(
            dataclasses.replace(gb200("blank", 1), labels={CLIQUE_LABEL: "  "}), True, None, id="blank label"
        ),
        pytest.param(_dra_gb200({CLIQUE_LABEL: clique_id(3)}), True, (clique_id(3), 4, True), id="DRA + GFD"),
        pytest.param(
            _dra_gb200({CLIQUE_LABEL: clique_id(3)}, allocated=1),
            True,
            (clique_id(3), 3, False),
            id="DRA used",
        ),
        pytest.param(_dra_gb200({}), True, None, id="DRA without the label: the devices carry no clique"),
    ],
)
def test_which_clique_a_node_counts_in(
    node: NodeFacts, usable: bool, expected: tuple[str, int, bool] | None
) -> None:
    """The clique is the GFD label, on device-plugin and on DRA nodes alike: the NVIDIA DRA driver's
    gpu.nvidia.com devices publish no clique or cluster UUID attribute (docs/topology.md), and its
    ComputeDomains themselves rely on GFD's label."""
    part = clique_part(node, usable)
    assert (None if part is None else (part.key[1], part.free, part.whole)) == expected
    if part is not None:
        assert part.key[0] == "GB200"


def test_a_dra_rack_is_summarised_like_a_device_plugin_rack() -> None:
    dra_node = _dra_gb200({CLIQUE_LABEL: clique_id(1)}, allocated=4)
    summary = cluster("d", [dra_node, *rack("d", 1, free_nodes=2)])
    assert dra_node.dra
    assert summary.cliques == (
        CliqueCapacity(clique_id(1), "GB200", nodes=3, free_nodes=2, free=8, nodes_by_free=(1, 0, 0, 0, 2)),
    )
