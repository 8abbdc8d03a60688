"""broker.cache.reservations: what the placer may assume, as tables over the histograms level 1 reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cache.reservations import deduct, deduct_held, live, take_best_fit
from broker.core.model import ClusterSummary, MigCapacity, ProductCapacity, QueueHeadroom, Reservation
from broker.core.topology import CliqueCapacity

NOW = 1_000.0
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"


def resv(
    units: int, pods: int = 1, *, resource: str = GPU, expires: float = NOW + 60, cluster: str = "a"
) -> Reservation:
    return Reservation("j", 1, cluster, "H100-80GB", resource, units, NOW, expires, pods=pods)


def product(nodes_by_free: tuple[int, ...], numa_blocks: tuple[int, ...] | None = None) -> ProductCapacity:
    free = sum(k * n for k, n in enumerate(nodes_by_free))
    return ProductCapacity(
        "H100-80GB", 81559, 64, 64, 64 - free, free, nodes_by_free, numa_blocks or nodes_by_free, nodes=8
    )


@pytest.mark.parametrize(
    ("hist", "per_pod", "pods", "expected"),
    [
        # the smallest domain that holds the pod takes it (where a bin-packing scheduler binds it)
        ((0, 0, 1, 0, 0, 0, 0, 0, 1), 2, 1, (1, 0, 0, 0, 0, 0, 0, 0, 1)),
        ((0, 0, 1, 0, 0, 0, 0, 0, 1), 7, 1, (0, 1, 1)),
        # a gang: each pod best-fits in turn
        ((0, 0, 0, 0, 2), 4, 2, (2,)),
        ((0, 0, 0, 0, 1, 0, 0, 0, 1), 4, 3, (2,)),
        ((0, 0, 0, 0, 1, 0, 0, 0, 1), 4, 2, (1, 0, 0, 0, 1)),
        # no domain holds the pod any more: the largest is drained (never shows room that isn't there)
        ((0, 0, 0, 3), 4, 1, (1, 0, 0, 2)),
        ((1,), 4, 1, (1,)),
        # nothing to take
        ((0, 0, 1), 0, 1, (0, 0, 1)),
    ],
)
def test_take_best_fit(hist: tuple[int, ...], per_pod: int, pods: int, expected: tuple[int, ...]) -> None:
    assert take_best_fit(hist, per_pod, pods) == expected


def test_the_7_4_case_that_taking_from_the_top_got_wrong() -> None:
    """Free {7, 4}, a 3-GPU pod reserved: a bin-packing scheduler binds it to the 4-node, leaving {7, 1}
    (one 4-GPU pod fits). Taking from the top assumed {4, 4} (two fit): an over-commit."""
    hist = (0, 0, 0, 0, 1, 0, 0, 1)
    after = take_best_fit(hist, 3, 1)
    assert after == (0, 1, 0, 0, 0, 0, 0, 1)
    assert product(after).pods_that_fit(4) == 1


def test_deduct_whole_gpus_and_mig_slices() -> None:
    mig = MigCapacity("H100-80GB", "1g.10gb", MIG, 14, 6, 4)
    s = ClusterSummary("a", products=(product((0, 0, 1, 0, 0, 0, 0, 0, 1)),), mig=(mig,))

    after = deduct(s, [resv(3), resv(2, 2, resource=MIG)], NOW)

    [p] = after.products
    assert (p.free, p.allocated, p.nodes_by_free) == (7, 57, (0, 0, 1, 0, 0, 1))
    assert (after.mig[0].free, after.mig[0].largest_free_on_node) == (4, 2)


@pytest.mark.parametrize(
    ("reservation", "counts"),
    [
        (resv(8, expires=NOW), False),  # expired at now
        (resv(8, expires=NOW + 0.001), True),
        (resv(8, cluster="b"), False),  # another cluster's
    ],
)
def test_only_live_reservations_of_the_cluster_count(reservation: Reservation, counts: bool) -> None:
    s = ClusterSummary("a", products=(product((0, 0, 0, 0, 0, 0, 0, 0, 1)),))
    assert bool(live([reservation], "a", NOW)) is counts
    assert (deduct(s, [reservation], NOW).products[0].free == 0) is counts


def test_reserved_units_count_against_the_kueue_quota_covering_them() -> None:
    gpu_q = QueueHeadroom("cq", "h100", GPU, nominal=24, used=6)
    cpu_q = QueueHeadroom("cq", "h100", "cpu", nominal=96, used=0)
    s = ClusterSummary("a", products=(product((0, 0, 0, 0, 0, 0, 0, 0, 3)),), queues=(gpu_q, cpu_q))

    after = deduct(s, [resv(8, 2)], NOW)

    assert [(q.resource, q.used, q.headroom) for q in after.queues] == [(GPU, 14, 10), ("cpu", 0, 96)]


def test_nothing_live_returns_the_summary_itself() -> None:
    s = ClusterSummary("a", products=(product((0, 1)),))
    assert deduct(s, [], NOW) is s


_HELD = st.lists(
    st.builds(
        lambda units_per_pod, pods, kind, clique: Reservation(
            "j", 1, "a", "H100-80GB", MIG if kind else GPU, units_per_pod * pods, NOW, NOW + 60, pods=pods,
            clique=clique if not kind else None,
        ),
        st.integers(0, 9),
        st.integers(1, 4),
        st.booleans(),
        st.sampled_from([None, "uuid.1"]),
    ),
    max_size=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(held=_HELD, split=st.integers(0, 12))
def test_deducting_in_steps_is_deducting_at_once(held: list[Reservation], split: int) -> None:
    """What lets the fleet cache add a new reservation to a cluster's placeable view without going over
    the others again: any prefix deducted, then the rest, equals all of them deducted together."""
    s = ClusterSummary(
        "a",
        products=(product((1, 0, 2, 0, 1, 0, 0, 3, 2)),),
        mig=(MigCapacity("H100-80GB", "1g.10gb", MIG, 14, 6, 4),),
        queues=(QueueHeadroom("cq", "h100", GPU, nominal=24, used=6), QueueHeadroom("cq", "h100", MIG, 8, 1)),
        cliques=(CliqueCapacity("uuid.1", "H100-80GB", nodes=4, free_nodes=2, free=20, nodes_by_free=(0, 0, 0, 0, 2, 0, 0, 0, 2)),),
    )  # fmt: skip
    at_once = deduct_held(s, held)
    in_steps = deduct_held(s, held[:split])
    for r in held[split:]:
        in_steps = deduct_held(in_steps, [r])
    assert in_steps == at_once
    assert at_once == deduct(s, held, NOW)
