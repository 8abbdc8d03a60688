"""Issue 28 point 2: an 8-GPU pod refused only because a node's topology policy is single-numa-node
(8 free on the node, 4 + 4 in its zones) gets a reason naming the policy, from the summary the pollers
build (capacity.summarize and the incremental CapacityIndex agree), and `gpufed fleet` says it too."""

from __future__ import annotations

from broker.api.schemas import summary_view
from broker.app.fleet_tables import numa_notes
from broker.burst.wait_prediction import slots_for
from broker.capacity.index import CapacityIndex
from broker.capacity.kube_objects import node_facts
from broker.capacity.rollup import summarize
from broker.core.model import ClusterSnapshot, ClusterSummary, ClusterTraits, Health, JobRequest, NoFit
from broker.scheduler.placement import PlacementPolicy, place
from tests.unit.k8s_builders import node, nrt

LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}


def _summary(cluster: str, policy: str) -> ClusterSummary:
    facts = node_facts(node("n1", LABELS), [], nrt("n1", (4, 4), policy=policy))
    return summarize(ClusterSnapshot(cluster, (facts,)), ClusterTraits(cluster), Health.HEALTHY, 1.0)


def test_a_refusal_caused_by_single_numa_node_names_the_policy() -> None:
    result = place(
        JobRequest("big", gpus_per_pod=8),
        [_summary("onprem-b", "single-numa-node")],
        {},
        PlacementPolicy(),
        1.0,
    )
    assert isinstance(result, NoFit)
    assert "single-numa-node" in result.message and "one NUMA zone" in result.message
    assert "(best: 4 on onprem-b)" in result.message


def test_without_the_policy_the_reason_stays_plain() -> None:
    small = _summary("onprem-a", "best-effort")
    result = place(JobRequest("big", gpus_per_pod=16), [small], {}, PlacementPolicy(), 1.0)
    assert isinstance(result, NoFit)
    assert "NUMA" not in result.message and "no node with 16 free H100-80GB" in result.message


def test_the_incremental_index_carries_the_same_figure() -> None:
    facts = node_facts(node("n1", LABELS), [], nrt("n1", (4, 4), policy="single-numa-node"))
    index = CapacityIndex("onprem-b")
    index.upsert(facts)
    built = index.summary(ClusterTraits("onprem-b"), Health.HEALTHY, 1.0)
    assert built.products[0].single_numa_node_free == 8
    assert _summary("onprem-b", "single-numa-node").products[0].single_numa_node_free == 8
    assert _summary("onprem-a", "none").products[0].single_numa_node_free == 0
    # for people, the node has 8 free; for placement, two slots of 4 (its zones)
    assert built.products[0].whole_nodes_by_free == (0,) * 8 + (1,)
    assert built.products[0].nodes_by_free == (0,) * 4 + (2,)
    assert slots_for(built.products[0], 8) == 0 and slots_for(built.products[0], 4) == 2


def test_the_fleet_view_explains_zero_8_gpu_slots() -> None:
    view = summary_view(_summary("onprem-b", "single-numa-node"), 1.0)
    (note,) = numa_notes([view])
    assert note.startswith("onprem-b H100-80GB: topology policy single-numa-node")
    assert "8 free on one node, at most 4 in one zone" in note
    assert numa_notes([summary_view(_summary("onprem-a", "none"), 1.0)]) == []
