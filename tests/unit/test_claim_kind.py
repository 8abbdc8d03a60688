"""Level 2 follows capacity: the claim kind of each job comes from how the chosen cluster serves its product.

A table over the cases of issue 22: DRA only, device plugin only, a cluster mixing kinds per product, one
product offered both ways, and the per-cluster `gpuAllocation` override. Each row goes from nodes to the
summary (capacity.rollup and the incremental CapacityIndex agree), level 1 (placement.place) and level 2
(manifest.build_workload): the Job asks for `nvidia.com/gpu` or claims through a ResourceClaimTemplate.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker.capacity import rollup
from broker.capacity.index import CapacityIndex
from broker.core.model import (
    ClusterTraits,
    GpuProduct,
    Health,
    JobRequest,
    NodeFacts,
    NoFit,
    Placement,
    ProductCapacity,
)
from broker.scheduler.placement import PlacementPolicy, place
from broker.workload.manifest import build_workload

H200 = GpuProduct("H200-141GB", 143771)
A100 = GpuProduct("A100-80GB", 81920)
NOW = 1000.0


def dp(name: str, product: GpuProduct, gpus: int, used: int = 0) -> NodeFacts:
    label = "NVIDIA-H200" if product is H200 else "NVIDIA-A100-SXM4-80GB"
    return NodeFacts(
        name,
        product,
        gpu_count=gpus,
        gpus_allocatable=gpus,
        gpus_allocated=used,
        labels={"nvidia.com/gpu.product": label},
    )


def dra(name: str, product: GpuProduct, gpus: int, used: int = 0) -> NodeFacts:
    return NodeFacts(name, product, gpu_count=gpus, gpus_allocatable=gpus, gpus_allocated=used, dra=True)


def summaries(nodes: list[NodeFacts], traits: ClusterTraits) -> Any:
    from broker.core.model import ClusterSnapshot

    batch = rollup.summarize(ClusterSnapshot(traits.name, tuple(nodes)), traits, Health.HEALTHY, NOW)
    index = CapacityIndex(traits.name)
    for n in sorted(nodes, key=lambda n: n.name):
        index.upsert(n)
    assert index.summary(traits, Health.HEALTHY, NOW) == batch  # both paths choose the same kind
    return batch


def claims_gpus(job: JobRequest, where: Placement, traits: ClusterTraits) -> str:
    """How the Job's pods ask for GPUs: 'dra' (a claim template) or 'device-plugin' (nvidia.com/gpu)."""
    m = build_workload("j1", 1, job, where, traits)
    pod = m.job["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"].get("limits", {})
    templates = [c for c in m.companions if c["kind"] == "ResourceClaimTemplate"]
    if templates:
        assert "nvidia.com/gpu" not in limits and pod["resourceClaims"]
        return "dra"
    assert limits.get("nvidia.com/gpu") == str(job.gpus_per_pod)
    return "device-plugin"


CASES = [
    # id, nodes, gpuAllocation, product asked, offered, kind written, free GPUs level 1 counts
    ("dra-only", [dra("n1", H200, 4)], "auto", "H200-141GB", "dra", "dra", 4),
    ("device-plugin-only", [dp("n1", A100, 8)], "auto", "A100-80GB", "device-plugin", "device-plugin", 8),
    ("mixed-cluster-h200", [dp("a1", A100, 8), dra("h1", H200, 4)], "auto", "H200-141GB", "dra", "dra", 4),
    (
        "mixed-cluster-a100",
        [dp("a1", A100, 8), dra("h1", H200, 4)],
        "auto",
        "A100-80GB",
        "device-plugin",
        "device-plugin",
        8,
    ),
    # one product both ways: both kinds counted; each job asks the kind it fits most snugly (DRA on a tie)
    (
        "both-dp-snugger",
        [dp("a", H200, 2), dra("b", H200, 8)],
        "auto",
        "H200-141GB",
        "both",
        "device-plugin",
        10,
    ),
    ("both-dra-snugger", [dp("a", H200, 8), dra("b", H200, 4)], "auto", "H200-141GB", "both", "dra", 12),
    ("both-tie-is-dra", [dp("a", H200, 4), dra("b", H200, 4)], "auto", "H200-141GB", "both", "dra", 8),
    # the override decides for every product of the cluster
    ("override-dra", [dp("a", H200, 8), dra("b", H200, 4)], "dra", "H200-141GB", "both", "dra", 4),
    (
        "override-device-plugin",
        [dp("a", H200, 2), dra("b", H200, 8)],
        "device-plugin",
        "H200-141GB",
        "both",
        "device-plugin",
        2,
    ),
]


@pytest.mark.parametrize(
    ("nodes", "override", "product", "offered", "kind", "free"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_claim_kind_follows_how_the_cluster_serves_the_product(
    nodes: list[NodeFacts], override: str, product: str, offered: str, kind: str, free: int
) -> None:
    traits = ClusterTraits("onprem-a", gpu_allocation=override)
    summary = summaries(nodes, traits)
    cap = summary.product(product)
    assert cap is not None
    assert (cap.offered, cap.free) == (offered, free)
    if offered != "both" or override != "auto":
        assert cap.dra == (kind == "dra")  # one kind counted: the one every job asks through
    assert cap.total == sum(n.gpu_count for n in nodes if n.product is not None and n.product.name == product)
    job = JobRequest("train", gpus_per_pod=2, gpu_products=(product,))
    where = place(job, [summary], {"onprem-a": traits}, PlacementPolicy(), NOW)
    assert isinstance(where, Placement), where
    assert claims_gpus(job, where, traits) == kind


def test_a_gang_larger_than_either_kind_is_not_placed_though_both_kinds_together_have_room() -> None:
    traits = ClusterTraits("onprem-a")
    summary = summaries([dp("a", H200, 2), dra("b", H200, 8)], traits)  # 10 free, 8 of them DRA
    job = JobRequest("train", gpus_per_pod=2, pods=5, gpu_products=("H200-141GB",))
    # 5 pods x 2: four fit on the DRA node; the fifth would need the device-plugin GPUs, which a claim
    # can't reach (one Job asks one way)
    result = place(job, [summary], {"onprem-a": traits}, PlacementPolicy(), NOW)
    assert isinstance(result, NoFit)


def test_forced_to_a_kind_that_does_not_serve_the_product_nothing_is_placeable() -> None:
    traits = ClusterTraits("onprem-a", gpu_allocation="device-plugin")
    summary = summaries([dp("a1", A100, 8), dra("h1", H200, 4)], traits)
    cap = summary.product("H200-141GB")
    assert cap == ProductCapacity(
        "H200-141GB", H200.memory_mib, total=4, allocatable=0, allocated=0, free=0, offered="dra", dra=False
    )
    job = JobRequest("train", gpus_per_pod=2, gpu_products=("H200-141GB",))
    refused = place(job, [summary], {"onprem-a": traits}, PlacementPolicy(), NOW)
    assert isinstance(refused, NoFit) and refused.never_fits
    assert refused.message == "0/1 clusters are available: 1 no H200-141GB."  # as if it had none
    a100 = JobRequest("train", gpus_per_pod=2, gpu_products=("A100-80GB",))
    where = place(a100, [summary], {"onprem-a": traits}, PlacementPolicy(), NOW)
    assert isinstance(where, Placement) and claims_gpus(a100, where, traits) == "device-plugin"


def test_offered_kind_does_not_flip_when_nodes_are_cordoned() -> None:
    cordoned = NodeFacts("b", H200, gpu_count=8, gpus_allocatable=8, dra=True, unschedulable=True)
    summary = summaries([dp("a", H200, 2), cordoned], ClusterTraits("onprem-a"))
    cap = summary.product("H200-141GB")
    assert cap is not None and (cap.offered, cap.free) == ("both", 2)  # the device plugin's 2 still count
    assert [(k.dra, k.whole_gpus, k.free) for k in cap.kinds] == [(False, 2, 2), (True, 8, 0)]


def test_fleet_table_marks_how_each_product_is_offered() -> None:
    from broker.app.fleet_tables import offered_mark

    assert offered_mark({"offered": "device-plugin"}) == ""
    assert offered_mark({"offered": "dra", "askedThrough": "dra"}) == " [dra]"
    assert offered_mark({"offered": "both", "askedThrough": "dra"}) == " [both: dra]"
    assert offered_mark({"offered": "both", "askedThrough": "device-plugin"}) == " [both: plugin]"
    both = [
        {"kind": "device-plugin", "free": 8, "allocatable": 8},
        {"kind": "dra", "free": 0, "allocatable": 4},
    ]
    assert (
        offered_mark({"offered": "both", "askedThrough": "per-job", "kinds": both})
        == " [both: plugin 8/8, dra 0/4]"
    )
