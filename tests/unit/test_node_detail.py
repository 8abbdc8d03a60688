"""The fleet view's node detail: what each GPU node offers the broker, and in words why it offers nothing."""

from __future__ import annotations

from dataclasses import replace

from broker.capacity.node_detail import node_detail, nodes_table
from broker.core.model import GpuProduct, MigSlices, MigStrategy, NodeFacts, NumaZone, Taint


def _node(**kw: object) -> NodeFacts:
    base = NodeFacts(
        name="gpu-1",
        product=GpuProduct(name="H100-80GB", memory_mib=81559),
        gpu_count=8,
        gpus_allocatable=8,
        gpus_allocated=3,
        numa_zones=(NumaZone("node-0", 4, 1), NumaZone("node-1", 4, 4)),
        topology_policy="single-numa-node",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_node_with_free_gpus_offers_them_with_its_numa_blocks() -> None:
    d = node_detail(_node())
    assert d.offers and d.whole_free == 5 and d.whole_allocatable == 8
    assert [(z.zone, z.gpus_available) for z in d.numa] == [("node-0", 1), ("node-1", 4)]
    assert d.topology_policy == "single-numa-node"


def test_why_a_node_offers_nothing_is_said_in_words() -> None:
    assert node_detail(_node(gpus_allocated=8)).offers_nothing == "all 8 GPUs in use"
    assert node_detail(_node(unschedulable=True)).offers_nothing == "cordoned (spec.unschedulable)"
    assert node_detail(_node(ready=False)).offers_nothing == "node not Ready"
    tainted = node_detail(_node(taints=(Taint("maintenance", "NoSchedule", "true"),)))
    assert (
        tainted.offers_nothing == "taint maintenance=true:NoSchedule not tolerated by the broker's workloads"
    )
    assert tainted.taints == ("maintenance=true:NoSchedule",) and tainted.whole_free == 0
    # the GPU taint is tolerated everywhere, the spot taint only where the cluster is declared spot
    assert node_detail(_node(taints=(Taint("nvidia.com/gpu", "NoSchedule", "present"),))).offers
    spot = _node(taints=(Taint("cloud.gpufed.io/spot", "NoSchedule", "true"),))
    assert not node_detail(spot).offers and node_detail(spot, spot=True).offers
    reconfiguring = _node(mig_strategy=MigStrategy.MIXED, mig_settled=False, gpus_allocatable=0)
    assert node_detail(reconfiguring).offers_nothing is not None
    assert "MIG reconfiguring" in (node_detail(reconfiguring).offers_nothing or "")


def test_mig_and_time_sliced_capacity_count_as_offers() -> None:
    mig = node_detail(
        _node(
            gpus_allocatable=0,
            gpus_allocated=0,
            mig_strategy=MigStrategy.MIXED,
            mig=(MigSlices("1g.10gb", 14, 14), MigSlices("3g.40gb", 4, 2)),
        )
    )
    assert mig.offers and [(m.profile, m.free) for m in mig.mig] == [("1g.10gb", 0), ("3g.40gb", 2)]
    shared = node_detail(
        _node(
            gpus_allocatable=0,
            gpus_allocated=0,
            shared_replicas=4,
            shared_allocatable=32,
            shared_allocated=30,
        )
    )
    assert shared.offers and shared.shared_free == 2 and shared.shared_replicas == 4


def test_the_table_lists_gpu_nodes_by_name() -> None:
    cpu = NodeFacts(name="cpu-1", product=None)
    table = nodes_table([_node(name="b"), cpu, _node(name="a")])
    assert [d.name for d in table] == ["a", "b"]
