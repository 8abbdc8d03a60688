"""The claim kind is chosen per job: a product served both ways is fitted one kind at a time (issue 47).

A cluster with one node of 8 device-plugin H100 and one of 4 DRA H100 offers 12: an 8-GPU job fits only
the device plugin's node, a 4-GPU job either (the DRA node, snugger), and once the DRA node is held the
device plugin's. A job fits when it fits one kind entirely: pods of one Job ask one way. Reservations
take from the kind they hold, so a second job is not promised the same GPUs. Pure: summaries from
NodeFacts (rollup and the incremental index agree), placement.place, reservations.deduct_held.
"""

from __future__ import annotations

import pytest

from broker.cache.reservations import deduct_held
from broker.capacity import rollup
from broker.capacity.index import CapacityIndex
from broker.core.model import (
    ClusterSnapshot,
    ClusterSummary,
    ClusterTraits,
    GpuProduct,
    Health,
    JobRequest,
    NodeFacts,
    NoFit,
    Placement,
    Reservation,
)
from broker.scheduler.placement import PlacementPolicy, place

H100 = GpuProduct("H100-80GB", 81559)
NOW = 1000.0
TRAITS = ClusterTraits("mixed")


def dp(name: str, gpus: int, used: int = 0) -> NodeFacts:
    return NodeFacts(
        name,
        H100,
        gpu_count=gpus,
        gpus_allocatable=gpus,
        gpus_allocated=used,
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )


def dra(name: str, gpus: int, used: int = 0) -> NodeFacts:
    return NodeFacts(name, H100, gpu_count=gpus, gpus_allocatable=gpus, gpus_allocated=used, dra=True)


def summary(nodes: list[NodeFacts]) -> ClusterSummary:
    batch = rollup.summarize(ClusterSnapshot("mixed", tuple(nodes)), TRAITS, Health.HEALTHY, NOW)
    index = CapacityIndex("mixed")
    for n in nodes:
        index.upsert(n)
    assert index.summary(TRAITS, Health.HEALTHY, NOW) == batch
    return batch


def kind_of(job: JobRequest, s: ClusterSummary) -> str | None:
    where = place(job, [s], {"mixed": TRAITS}, PlacementPolicy(), NOW)
    if isinstance(where, NoFit):
        return None
    assert isinstance(where, Placement)
    return "dra" if where.dra else "device-plugin"


def test_both_kinds_are_counted_and_each_kept() -> None:
    cap = summary([dp("plugin-8", 8), dra("dra-4", 4)]).product("H100-80GB")
    assert cap is not None
    assert (cap.offered, cap.total, cap.allocatable, cap.free, cap.max_free_on_one_node) == (
        "both",
        12,
        12,
        12,
        8,
    )
    assert [(k.dra, k.allocatable, k.free, k.max_free_on_one_node) for k in cap.kinds] == [
        (False, 8, 8, 8),
        (True, 4, 4, 4),
    ]


FIT = [
    # id, nodes, gpus per pod, pods, the kind the job asks through (None: no fit)
    ("8-gpu-only-plugin-node", [dp("p", 8), dra("d", 4)], 8, 1, "device-plugin"),
    ("4-gpu-snugger-on-dra", [dp("p", 8), dra("d", 4)], 4, 1, "dra"),
    ("4-gpu-dra-taken", [dp("p", 8), dra("d", 4, used=4)], 4, 1, "device-plugin"),
    ("4-gpu-plugin-taken", [dp("p", 8, used=8), dra("d", 4)], 4, 1, "dra"),
    ("gang-3x4-spans-kinds-refused", [dp("p", 8), dra("d", 4)], 4, 3, None),
    ("gang-2x4-one-kind", [dp("p", 8), dra("d", 4)], 4, 2, "device-plugin"),
    ("12-gpus-no-node", [dp("p", 8), dra("d", 4)], 12, 1, None),
    ("dra-larger-8-on-dra", [dp("p", 4), dra("d", 8)], 8, 1, "dra"),
    ("both-full", [dp("p", 8, used=8), dra("d", 4, used=4)], 1, 1, None),
]


@pytest.mark.parametrize(("nodes", "per_pod", "pods", "kind"), [c[1:] for c in FIT], ids=[c[0] for c in FIT])
def test_a_job_fits_one_kind_entirely_and_asks_through_it(
    nodes: list[NodeFacts], per_pod: int, pods: int, kind: str | None
) -> None:
    job = JobRequest("train", gpus_per_pod=per_pod, pods=pods, gpu_products=("H100-80GB",))
    assert kind_of(job, summary(nodes)) == kind


def _held(where: Placement) -> Reservation:
    resource = "gpu.nvidia.com" if where.dra else where.resource_name  # as the placer holds it
    return Reservation(
        "j1", 1, "mixed", where.product, resource, where.total_units, NOW, NOW + 60, pods=where.pods
    )


def test_a_reservation_takes_from_its_own_kind_so_the_next_job_goes_the_other_way() -> None:
    s = summary([dp("p", 8), dra("d", 4)])
    four = JobRequest("train", gpus_per_pod=4, gpu_products=("H100-80GB",))
    first = place(four, [s], {"mixed": TRAITS}, PlacementPolicy(), NOW)
    assert isinstance(first, Placement) and first.dra  # the DRA node, snugger
    held = deduct_held(s, [_held(first)])
    cap = held.product("H100-80GB")
    assert cap is not None and (cap.free, [k.free for k in cap.kinds]) == (8, [8, 0])
    assert kind_of(four, held) == "device-plugin"  # the DRA node is held: the device plugin's node
    eight = JobRequest("train", gpus_per_pod=8, gpu_products=("H100-80GB",))
    assert kind_of(eight, held) == "device-plugin"
    second = place(eight, [held], {"mixed": TRAITS}, PlacementPolicy(), NOW)
    assert isinstance(second, Placement)
    full = deduct_held(held, [_held(second)])
    assert kind_of(JobRequest("train", gpus_per_pod=1, gpu_products=("H100-80GB",)), full) is None


def test_an_override_still_counts_one_kind_only() -> None:
    traits = ClusterTraits("mixed", gpu_allocation="dra")
    nodes = (dp("p", 8), dra("d", 4))
    s = rollup.summarize(ClusterSnapshot("mixed", nodes), traits, Health.HEALTHY, NOW)
    cap = s.product("H100-80GB")
    assert cap is not None and (cap.free, cap.dra, cap.kinds) == (4, True, ())
    eight = JobRequest("train", gpus_per_pod=8, gpu_products=("H100-80GB",))
    assert isinstance(place(eight, [s], {"mixed": traits}, PlacementPolicy(), NOW), NoFit)


def test_a_cloud_pools_headroom_grows_the_device_plugin_kind_of_a_product_served_both_ways() -> None:
    from dataclasses import replace

    from broker.burst.scaleup import grow
    from broker.core.model import Tier

    s = replace(summary([dp("p", 8, used=8), dra("d", 4, used=4)]), tier=Tier.CLOUD)
    grown = grow(s, "H100-80GB", gpus_per_node=8, max_nodes=3)  # one more node of 8 may be added
    cap = grown.product("H100-80GB")
    assert cap is not None and (cap.free, [k.free for k in cap.kinds]) == (8, [8, 0])
    eight = JobRequest("train", gpus_per_pod=8, gpu_products=("H100-80GB",), allow_burst=True)
    assert kind_of(eight, grown) == "device-plugin"  # onto the node the pool would add
