"""Scale-up headroom (broker.burst.scaleup): a cloud pool's missing nodes count once, reservations included."""

from __future__ import annotations

import pytest

from broker.burst.scaleup import grow, needs_scale_up
from broker.cache import reservations
from broker.core.model import ClusterSummary, ProductCapacity, Reservation, Tier

NOW = 1_800_000_000.0


def cloud(l4_nodes: int = 0, free_per_node: int = 8, tier: Tier = Tier.CLOUD) -> ClusterSummary:
    products: tuple[ProductCapacity, ...] = ()
    if l4_nodes:
        hist = tuple(l4_nodes if k == free_per_node else 0 for k in range(9))
        gpus = 8 * l4_nodes
        free = free_per_node * l4_nodes
        products = (ProductCapacity("L4", 23034, gpus, gpus, gpus - free, free, hist, hist, l4_nodes),)
    return ClusterSummary("cloud-burst", tier=tier, products=products)


def hold(units: int, job: str = "a") -> Reservation:
    return Reservation(job, 1, "cloud-burst", "L4", "nvidia.com/gpu", units, NOW, NOW + 300)


def l4(s: ClusterSummary) -> ProductCapacity:
    p = s.product("L4")
    assert p is not None
    return p


def test_a_pool_at_zero_nodes_offers_its_max_as_free_nodes_of_its_product() -> None:
    s = grow(cloud(), "L4", 8, 4)
    p = l4(s)
    assert (p.free, p.allocatable, p.nodes, p.max_free_on_one_node) == (32, 32, 4, 8)
    assert p.memory_mib == 23034 and p.gfd_products == ("NVIDIA-L4",)
    assert s.autoscale_headroom == {"L4": 32}


@pytest.mark.parametrize(
    ("nodes", "added"),
    [(1, 24), (4, 0), (5, 0)],
    ids=["one-there", "at-max", "over-max"],
)
def test_nodes_already_there_are_not_addable(nodes: int, added: int) -> None:
    s = grow(cloud(nodes), "L4", 8, 4)
    assert s.autoscale_headroom.get("L4", 0) == added
    assert l4(s).free == 8 * nodes + added


def test_on_prem_and_pools_without_max_are_left_alone() -> None:
    on_prem = cloud(tier=Tier.ONPREM)
    assert grow(on_prem, "L4", 8, 4) is on_prem
    assert grow(cloud(), "L4", 8, 0).products == ()


def test_a_placement_into_headroom_is_counted_once_before_and_after_its_node_arrives() -> None:
    # max 2 nodes; a job of 8 GPUs placed into the headroom holds one node's worth
    before = reservations.deduct(grow(cloud(), "L4", 8, 2), [hold(8)], NOW)
    assert l4(before).free == 8
    assert l4(before).pods_that_fit(8) == 1  # one more 8-GPU job, not two
    # its node arrived (the pod not bound yet): 1 real node free, 1 addable, the reservation still held
    arrived = reservations.deduct(grow(cloud(1), "L4", 8, 2), [hold(8)], NOW)
    assert l4(arrived).free == 8
    assert l4(arrived).pods_that_fit(8) == 1


@pytest.mark.parametrize(
    ("real_nodes", "free_per_node", "added", "gpus", "pods", "needs"),
    [
        (0, 8, 32, 8, 1, True),
        (1, 8, 24, 8, 1, False),
        (1, 4, 24, 8, 1, True),
        (1, 4, 24, 4, 1, False),
        (1, 8, 24, 8, 2, True),
        (1, 8, 0, 8, 1, False),
    ],
    ids=[
        "only-headroom",
        "real-node-fits",
        "real-node-too-small",
        "small-job-on-real",
        "gang-needs-more",
        "no-headroom",
    ],
)
def test_needs_scale_up(
    real_nodes: int, free_per_node: int, added: int, gpus: int, pods: int, needs: bool
) -> None:
    s = grow(cloud(real_nodes, free_per_node), "L4", 8, real_nodes + added // 8)
    assert needs_scale_up(l4(s), s.autoscale_headroom.get("L4", 0), 8, gpus, pods) is needs
