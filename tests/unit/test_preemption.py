"""broker.scheduler.preemption: who a high-priority job that fits nowhere evicts, and when the storm limits hold.

Victim selection as a table: lower priority only, tenants over their fair share first, then the fewest
GPU-hours lost, then fewer victims; the cluster where that is cheapest."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.model import ClusterSummary, JobRequest, ProductCapacity
from broker.scheduler import preemption
from broker.scheduler.preemption import PreemptionPolicy, Victim

NOW = 100_000.0
HOUR = 3600.0


def cluster(
    name: str, free: int, nodes: int = 2, per_node: int = 8, product: str = "H100-80GB"
) -> ClusterSummary:
    total = nodes * per_node
    return ClusterSummary(
        cluster=name,
        products=(ProductCapacity(product, 81559, total, total, total - free, free, (), (), nodes),),
    )


def victim(
    job_id: str, cluster: str = "a", gpus: int = 8, hours: float = 1.0, priority: int = 0, tenant: str = "t"
) -> Victim:
    return Victim(job_id, tenant, cluster, "H100-80GB", gpus, priority, NOW - hours * HOUR)


JOB = JobRequest("urgent", tenant="ml", gpus_per_pod=8, priority_class="production")
A, B = cluster("a", free=0), cluster("b", free=0)


@pytest.mark.parametrize(
    ("summaries", "victims", "over_share", "expected"),
    [
        # the victim that has run the shortest loses the least work
        ((A,), (victim("long", hours=5), victim("short", hours=1)), frozenset(), ("a", ["short"])),
        # never at or above the preemptor's priority
        (
            (A,),
            (victim("same", priority=1000), victim("above", priority=5000)),
            frozenset(),
            "no running job below priority 1000 to preempt",
        ),
        # a tenant over its fair share goes first, even if its job has run longer
        (
            (A,),
            (victim("fair", hours=1, tenant="cv"), victim("greedy", hours=3, tenant="big")),
            frozenset({"big"}),
            ("a", ["greedy"]),
        ),
        # two small victims cost less than one big one that ran long; free GPUs count
        (
            (cluster("a", free=4),),
            (victim("big", gpus=8, hours=4), victim("s1", gpus=2, hours=1), victim("s2", gpus=2, hours=1)),
            frozenset(),
            ("a", ["s1", "s2"]),
        ),
        # the cluster where evicting costs the fewest GPU-hours wins
        ((A, B), (victim("on-a", "a", hours=3), victim("on-b", "b", hours=2)), frozenset(), ("b", ["on-b"])),
        # a victim made unnecessary by a later one is dropped (8 needed: the 8-GPU job alone does it)
        (
            (A,),
            (victim("tiny", gpus=2, hours=0.1, tenant="big"), victim("whole", gpus=8, hours=0.5)),
            frozenset({"big"}),
            ("a", ["whole"]),
        ),
        # not enough lower-priority work in any one cluster
        (
            (A, B),
            (victim("x", "a", gpus=4), victim("y", "b", gpus=4)),
            frozenset(),
            "evicting every job below priority 1000 would not free 8 GPUs in one cluster",
        ),
        # a pod of 8 never fits nodes of 4, whatever is evicted
        (
            (cluster("a", free=0, nodes=4, per_node=4),),
            (victim("x", gpus=8),),
            frozenset(),
            "evicting every job below priority 1000 would not free 8 GPUs in one cluster",
        ),
    ],
)
def test_choose_the_cluster_and_victims_that_lose_the_least(
    summaries: tuple[ClusterSummary, ...],
    victims: tuple[Victim, ...],
    over_share: frozenset[str],
    expected: object,
) -> None:
    got = preemption.choose(JOB, 1000, summaries, victims, over_share, NOW)
    if isinstance(got, str):
        assert got == expected
    else:
        assert (got.cluster, [v.job_id for v in got.victims]) == expected
        assert got.freed == sum(v.gpus for v in got.victims)


def test_only_products_and_clusters_the_job_accepts_are_looked_at_and_mig_jobs_do_not_preempt() -> None:
    l4 = replace(victim("l4-job"), product="L4")
    assert preemption.choose(
        replace(JOB, gpu_products=("H100-80GB",)), 1000, (A,), (l4,), frozenset(), NOW
    ) == ("no running job below priority 1000 to preempt")
    assert isinstance(
        preemption.choose(replace(JOB, clusters=("b",)), 1000, (A, B), (victim("x"),), frozenset(), NOW), str
    )
    assert preemption.choose(
        replace(JOB, gpus_per_pod=0, mig_profile="1g.10gb"), 1000, (A,), (victim("x"),), frozenset(), NOW
    ) == ("only jobs of whole GPUs preempt")


def test_fair_shares_weigh_the_tenants_present() -> None:
    shares = preemption.fair_shares({"ml": 12, "cv": 4}, {"ml": 1.0, "cv": 1.0, "new": 2.0}, capacity=16)
    assert shares == {"ml": (0.75, 0.25), "cv": (0.25, 0.25), "new": (0.0, 0.5)}


POLICY = PreemptionPolicy(frozenset({"production"}), max_per_tenant=3, max_global=5, window_seconds=600)


@pytest.mark.parametrize(
    ("history", "victims", "expected"),
    [
        ((), 2, None),
        (((NOW - 10, "ml", 2),), 1, None),
        (
            ((NOW - 10, "ml", 2),),
            2,
            "preemption held back: tenant ml preempted 2 job(s) in the last 600 s (limit 3), this needs 2 more",
        ),
        (((NOW - 700, "ml", 3),), 3, None),  # outside the window
        (
            ((NOW - 10, "cv", 3), (NOW - 20, "vision", 1)),
            2,
            "preemption held back: 4 job(s) preempted fleet-wide in the last 600 s (limit 5), this needs 2 more",
        ),
    ],
)
def test_the_storm_limits_hold_per_tenant_and_fleet_wide(
    history: tuple[tuple[float, str, int], ...], victims: int, expected: str | None
) -> None:
    assert preemption.storm_refusal("ml", victims, history, POLICY, NOW) == expected


def test_only_the_configured_priority_classes_preempt() -> None:
    assert POLICY.may_preempt(JOB)
    assert not POLICY.may_preempt(replace(JOB, priority_class="default"))
    assert not POLICY.may_preempt(replace(JOB, priority_class=None))
