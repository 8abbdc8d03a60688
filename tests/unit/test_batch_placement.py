"""BatchPlacer: many decisions over one snapshot, each assumed into it, equal to place() one by one."""

from __future__ import annotations

import random
from dataclasses import replace

from broker.cache import reservations
from broker.capacity.fingerprint import fingerprint
from broker.core.model import ClusterSummary, JobRequest, NoFit, Placement, Reservation, Tier
from broker.scheduler.batch_placement import BatchPlacer, shape
from broker.scheduler.placement import PlacementPolicy, place
from tests.unit.k8s_builders import mig, product, summary

NOW = 1000.0
POLICY = PlacementPolicy()


def assume(s: ClusterSummary, p: Placement, job_id: str) -> ClusterSummary:
    r = Reservation(
        job_id, 1, p.cluster, p.product, p.resource_name, p.total_units, NOW, NOW + 60, pods=p.pods
    )
    return reservations.deduct(s, [r], NOW)


def fleet() -> list[ClusterSummary]:
    return [
        summary("a", product("H100-80GB", (0, 1, 0, 0, 2, 0, 0, 0, 3))),
        summary("b", product("A100-80GB", (0, 0, 0, 0, 0, 0, 0, 0, 4)), migs=(mig(free=10, largest=5),)),
        summary("c", product("H200-141GB", (0, 0, 0, 0, 0, 0, 0, 0, 2)), tier=Tier.CLOUD),
    ]


def jobs(n: int, seed: int) -> list[JobRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.2:
            out.append(JobRequest(f"m{i}", mig_profile="1g.10gb", mig_slices_per_pod=rng.choice((1, 2))))
        else:
            out.append(
                JobRequest(
                    f"w{i}",
                    gpus_per_pod=rng.choice((1, 2, 4, 8)),
                    pods=rng.choice((1, 1, 2)),
                    allow_burst=rng.random() < 0.5,
                )
            )
    return out


def test_a_batch_decides_exactly_as_place_one_by_one_with_assumption() -> None:
    batch = BatchPlacer(fleet(), {}, POLICY, NOW)
    one_by_one = {s.cluster: s for s in fleet()}
    for i, job in enumerate(jobs(60, seed=7)):
        expected = place(job, list(one_by_one.values()), {}, POLICY, NOW)
        got = batch.place(job)
        assert got == expected, job
        if isinstance(got, Placement):
            one_by_one[got.cluster] = assume(one_by_one[got.cluster], got, f"j{i}")
            assumed = batch.summary(got.cluster)
            assert assumed is not None
            batch.update(assume(assumed, got, f"j{i}"))


def test_a_shape_is_evaluated_once_per_cluster_until_that_cluster_changes() -> None:
    batch = BatchPlacer(fleet(), {}, POLICY, NOW)
    job = JobRequest("x", gpus_per_pod=16)  # fits nowhere
    for _ in range(50):
        assert isinstance(batch.place(replace(job, name=f"x{_}")), NoFit)
    assert batch.evaluations == 3  # one per cluster, not 150

    a = batch.summary("a")
    assert a is not None
    batch.update(a)
    batch.place(job)
    assert batch.evaluations == 4  # only the changed cluster again


def test_shape_ignores_what_level_1_does_not_read() -> None:
    a = JobRequest("a", gpus_per_pod=2, image="x", command=("run",), labels={"k": "v"}, duration_seconds=5)
    b = JobRequest("b", gpus_per_pod=2)
    assert shape(a) == shape(b)
    assert shape(a) != shape(replace(b, pods=2))


def test_the_fleet_fingerprint_moves_with_structure_not_with_free_capacity() -> None:
    base = fleet()
    busier = [replace(s, products=tuple(replace(p, free=0) for p in s.products)) for s in base]
    assert fingerprint(busier) == fingerprint(base)
    more = [*base, summary("d", product("L4", (0, 0, 0, 0, 0, 0, 0, 0, 1)))]
    assert fingerprint(more) != fingerprint(base)
    assert fingerprint(list(reversed(base))) == fingerprint(base)
