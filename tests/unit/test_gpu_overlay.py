"""Unhealthy GPUs leave a node's free capacity exactly once (broker.capacity.gpu_overlay), and the
cluster's free count and node histograms follow (broker.capacity.rollup)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.capacity import rollup
from broker.capacity.gpu_overlay import QUARANTINE_TAINT, with_gpu_health
from broker.core.gpu_health import NODE_WIDE, GpuFault, GpuState, NodeQuarantine
from broker.core.model import (
    ClusterSnapshot,
    ClusterTraits,
    GpuProduct,
    Health,
    MigSlices,
    MigStrategy,
    NodeFacts,
    NumaZone,
    ProductCapacity,
)

H100 = GpuProduct("H100-80GB", 81559, "hopper")


def node(allocatable: int = 8, allocated: int = 0, **kw: Any) -> NodeFacts:
    return NodeFacts("n0", H100, 8, allocatable, allocated, **kw)


def fault(gpu: int, quarantined: bool = True, state: GpuState = GpuState.UNHEALTHY) -> GpuFault:
    return GpuFault("n0", gpu, state, "XID 79 (GPU has fallen off the bus)", 0.0, "dcgm", 79, quarantined)


@pytest.mark.parametrize(
    ("allocatable", "allocated", "faults", "free"),
    [
        (8, 0, [], 8),
        (8, 0, [fault(3)], 7),  # the device plugin has not dropped it (yet): the broker does
        (7, 0, [fault(3)], 7),  # it has: not counted twice
        (6, 0, [fault(3)], 6),  # it dropped more than the broker knows of: its count stands
        (7, 0, [fault(3), fault(5)], 6),  # one dropped by the plugin, one more by the broker
        (8, 0, [fault(3, state=GpuState.RECOVERING)], 7),  # recovering: still out
        (8, 0, [fault(3, quarantined=False)], 8),  # held back by the circuit breaker: still free
        (8, 8, [fault(3)], 0),  # the job still holds all eight
        (8, 2, [fault(3)], 5),
    ],
)
def test_unhealthy_gpus_leave_free_capacity_once(
    allocatable: int, allocated: int, faults: list[GpuFault], free: int
) -> None:
    assert with_gpu_health(node(allocatable, allocated), faults).gpus_free == free


def test_the_faulted_gpus_numa_zone_loses_it() -> None:
    zones = (NumaZone("node-0", 4, 4), NumaZone("node-1", 4, 4))
    out = with_gpu_health(node(numa_zones=zones), [fault(5)])
    assert [z.gpus_available for z in out.numa_zones] == [4, 3]
    assert out.largest_numa_gpu_block == 4


@pytest.mark.parametrize(
    ("faults", "quarantine"),
    [([], NodeQuarantine("n0", "rule node-many-gpus", 0.0)), ([fault(NODE_WIDE)], None)],
)
def test_a_quarantined_node_offers_nothing(faults: list[GpuFault], quarantine: NodeQuarantine | None) -> None:
    out = with_gpu_health(node(), faults, quarantine)
    assert any(t.key == QUARANTINE_TAINT and t.effect == "NoSchedule" for t in out.taints)
    summary = rollup.summarize(ClusterSnapshot("c", (out,)), ClusterTraits("c"), Health.HEALTHY, 0.0)
    assert summary.products[0].free == 0


def test_mig_nodes_are_left_to_the_node_quarantine() -> None:
    mig = node(0, mig_strategy=MigStrategy.MIXED, mig=(MigSlices("1g.10gb", 7, 0),))
    assert with_gpu_health(mig, [fault(3)]) == mig


def _free(nodes: tuple[NodeFacts, ...]) -> ProductCapacity:
    return rollup.summarize(ClusterSnapshot("c", nodes), ClusterTraits("c"), Health.HEALTHY, 0.0).products[0]


def test_cluster_free_count_and_histogram_drop_by_exactly_the_unhealthy_gpu() -> None:
    nodes = (node(), NodeFacts("n1", H100, 8, 8, 0))
    before = _free(nodes)
    after = _free((with_gpu_health(nodes[0], [fault(3)]), nodes[1]))
    assert (before.free, after.free) == (16, 15)
    assert before.nodes_by_free[8] == 2 and after.nodes_by_free[8] == 1 and after.nodes_by_free[7] == 1
