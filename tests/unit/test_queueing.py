"""The global queue's rules as tables: priority, then dominant-resource fair share, then age; quotas with
borrowing; the reason a job waits. Pure: no Redis, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from broker.config.settings import parse_fleet_config
from broker.core.errors import ConfigError
from broker.core.model import (
    ClusterSummary,
    Health,
    JobRecord,
    JobRequest,
    JobState,
    MigCapacity,
    Placement,
    ProductCapacity,
)
from broker.queue import queueing
from broker.queue.queueing import QueuePolicy, TenantPolicy

H100 = "H100-80GB"
A100 = "A100-80GB"
CAPACITY = {H100: 16, A100: 8, "*": 24, "mig-1g.10gb": 14}
PRIORITIES = {"high": 1000, "low": -10}


def queued(
    job_id: str,
    tenant: str,
    at: float,
    gpus: int = 1,
    products: Sequence[str] = (H100,),
    prio: str | None = None,
    mig: str | None = None,
) -> JobRecord:
    request = JobRequest(
        name=job_id,
        tenant=tenant,
        gpus_per_pod=0 if mig else gpus,
        gpu_products=tuple(products),
        priority_class=prio,
        mig_profile=mig,
        mig_slices_per_pod=gpus if mig else 1,
    )
    return JobRecord(id=job_id, request=request, created_at=at, updated_at=at)


def running(tenant: str, units: int, product: str = H100, mig: str | None = None) -> JobRecord:
    resource = f"nvidia.com/mig-{mig}" if mig else "nvidia.com/gpu"
    where = Placement("c1", product, resource, units, 1, 50, mig_profile=mig)
    request = JobRequest(name=f"run-{tenant}", tenant=tenant, gpus_per_pod=0 if mig else units)
    return JobRecord(
        id=f"run-{tenant}-{product}-{units}", request=request, state=JobState.RUNNING, placement=where
    )


def ids(slots: Sequence[queueing.Slot]) -> list[str]:
    return [s.record.id for s in slots]


# ----------------------------------------------------------------------------------------------- order

ORDER_CASES = [
    pytest.param(
        [queued("a-old", "a", 1, prio="low"), queued("b-new", "b", 5, prio="high"), queued("c", "c", 3)],
        [],
        {},
        ["b-new", "c", "a-old"],
        id="priority first, whatever the age",
    ),
    pytest.param(
        [queued(f"{t}{i}", t, i * 10 + k) for i in (1, 2, 3) for k, t in enumerate("abc")][::-1],
        [],
        {},
        ["a1", "b1", "c1", "a2", "b2", "c2", "a3", "b3", "c3"],
        id="3 tenants, nothing running: round robin by age",
    ),
    pytest.param(
        [queued("a1", "a", 1), queued("a2", "a", 2), queued("b1", "b", 3), queued("c1", "c", 4)],
        [running("a", 8)],
        {},
        ["b1", "c1", "a1", "a2"],
        id="a tenant holding half the H100s goes after the ones holding none",
    ),
    pytest.param(
        [queued("a1", "a", 1), queued("b1", "b", 2), queued("c1", "c", 3)],
        [running("a", 4, A100), running("b", 6), running("c", 2)],
        {},
        ["c1", "b1", "a1"],
        id="dominant share: 4/8 A100 (a) weighs more than 6/16 H100 (b)",
    ),
    pytest.param(
        [queued("a1", "a", 1), queued("b1", "b", 2), queued("c1", "c", 3)],
        [running("a", 8), running("b", 4), running("c", 6)],
        {"a": TenantPolicy(weight=4.0)},
        ["a1", "b1", "c1"],
        id="weight 4 halves and halves again a's share (8/16 -> 1/8 < 4/16 < 6/16)",
    ),
    pytest.param(
        [queued("a1", "a", 1, gpus=8), queued("a2", "a", 2), queued("b1", "b", 3), queued("b2", "b", 4)],
        [],
        {},
        ["a1", "b1", "b2", "a2"],
        id="jobs put ahead count: after a's 8-GPU job, b goes twice",
    ),
    pytest.param(
        [queued("h1", "a", 9, prio="high"), queued("b1", "b", 1), queued("h2", "b", 8, prio="high")],
        [running("b", 10)],
        {},
        ["h1", "h2", "b1"],
        id="fair share only within one priority",
    ),
]


@pytest.mark.parametrize(("jobs", "active", "tenants", "expected"), ORDER_CASES)
def test_queue_order_is_priority_then_dominant_resource_fair_share_then_age(
    jobs: list[JobRecord], active: list[JobRecord], tenants: dict[str, TenantPolicy], expected: list[str]
) -> None:
    policy = QueuePolicy(priorities=PRIORITIES, tenants=tenants)
    slots = queueing.plan(jobs, active, policy, CAPACITY, CAPACITY)
    assert ids(slots) == expected
    assert [s.position for s in slots] == list(range(1, len(jobs) + 1))


def test_the_reason_names_the_higher_priority_jobs_ahead() -> None:
    jobs = [queued("h1", "a", 3, prio="high"), queued("h2", "b", 4, prio="high"), queued("n", "c", 1)]
    slots = queueing.plan(jobs, [], QueuePolicy(priorities=PRIORITIES), CAPACITY, CAPACITY)
    assert [s.reason for s in slots] == [
        "first in the queue",
        "behind 1 job of the same priority (fair share, then age)",
        "behind 2 higher-priority jobs",
    ]


# ----------------------------------------------------------------------------------------------- quotas

QUOTA = {
    "ml-research": TenantPolicy(quotas={H100: 16, "mig-1g.10gb": 4}),
    "vision": TenantPolicy(quotas={H100: 8}),
}

QUOTA_CASES = [
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=8)],
        [running("ml-research", 8)],
        {H100: 0},
        [("r1", None, None, ())],
        id="within quota: admitted even with nothing idle (it may still not fit)",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=8)],
        [running("ml-research", 16)],
        {H100: 8},
        [("r1", None, None, (H100,))],
        id="over quota, 8 idle, nobody else waits: borrows",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=8)],
        [running("ml-research", 16)],
        {H100: 4},
        [("r1", "tenant ml-research over its H100-80GB quota 16/16; 4 idle to borrow, needs 8", None, ())],
        id="over quota, too little idle: waits, the reason names the rule",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=8, prio="high"), queued("v1", "vision", 2, gpus=8)],
        [running("ml-research", 16)],
        {H100: 8},
        [
            (
                "r1",
                "tenant ml-research over its H100-80GB quota 16/16; the 8 idle are claimed by tenants "
                "within their quota",
                None,
                (),
            ),
            ("v1", None, None, ()),
        ],
        id="the idle GPUs are kept for a tenant with quota left, even one behind in the queue",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=8, prio="high"), queued("u1", "free-for-all", 2, gpus=8)],
        [running("ml-research", 16)],
        {H100: 8},
        [("r1", None, None, (H100,)), ("u1", None, None, ())],
        id="a tenant without quotas does not hold idle capacity back",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=8), queued("r2", "ml-research", 2, gpus=8)],
        [],
        {H100: 16},
        [("r1", None, None, ()), ("r2", None, None, ())],
        id="two jobs filling the quota exactly",
    ),
    pytest.param(
        [queued(f"r{i}", "ml-research", i, gpus=8) for i in (1, 2, 3)],
        [],
        {H100: 16},
        [
            ("r1", None, None, ()),
            ("r2", None, None, ()),
            ("r3", "tenant ml-research over its H100-80GB quota 16/16; 0 idle to borrow, needs 8", None, ()),
        ],
        id="jobs admitted ahead in the pass count against the quota",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=4, products=(H100, A100))],
        [running("ml-research", 16)],
        {H100: 0, A100: 8},
        [("r1", None, (A100,), ())],
        id="over the H100 quota: offered the products it has room on",
    ),
    pytest.param(
        [queued("r1", "ml-research", 1, gpus=4, products=())],
        [running("ml-research", 16)],
        {H100: 0, A100: 8},
        [("r1", None, (A100,), ())],
        id="a job naming no product cannot dodge the quota",
    ),
    pytest.param(
        [
            queued("m1", "ml-research", 1, gpus=2, mig="1g.10gb", prio="high"),
            queued("v1", "vision", 2, gpus=2, mig="1g.10gb"),
        ],
        [running("ml-research", 4, A100, mig="1g.10gb")],
        {"mig-1g.10gb": 10},
        [("m1", None, None, ("mig-1g.10gb",)), ("v1", None, None, ())],
        id="MIG profiles have quotas too; a tenant without quota does not block borrowing",
    ),
]


@pytest.mark.parametrize(("jobs", "active", "free", "expected"), QUOTA_CASES)
def test_quotas_with_borrowing_when_idle(
    jobs: list[JobRecord],
    active: list[JobRecord],
    free: dict[str, int],
    expected: list[tuple[str, str | None, tuple[str, ...] | None, tuple[str, ...]]],
) -> None:
    slots = queueing.plan(jobs, active, QueuePolicy(PRIORITIES, QUOTA), CAPACITY, free)
    assert [(s.record.id, s.blocked, s.products, s.borrowing) for s in slots] == expected
    for s in slots:
        if s.blocked:
            assert s.reason == s.blocked


def test_fleet_capacity_adds_products_mig_profiles_and_all_gpus() -> None:
    def summary(name: str, product: str, alloc: int, free: int, mig_free: int) -> ClusterSummary:
        return ClusterSummary(
            cluster=name,
            health=Health.HEALTHY,
            products=(ProductCapacity(product, 81559, alloc, alloc, alloc - free, free, (), (), 1),),
            mig=(MigCapacity(product, "1g.10gb", "nvidia.com/mig-1g.10gb", 7, mig_free, mig_free),),
        )

    capacity, free = queueing.fleet_capacity([summary("a", H100, 16, 4, 7), summary("b", A100, 8, 8, 3)])
    assert capacity == {H100: 16, A100: 8, "*": 24, "mig-1g.10gb": 14}
    assert free == {H100: 4, A100: 8, "*": 12, "mig-1g.10gb": 10}


def test_settings_declare_priority_classes_weights_and_quotas(tmp_path: Path) -> None:
    raw = {
        "clusters": [{"name": "c1", "kubeconfig": "c1.kubeconfig"}],
        "settings": {
            "priorityClasses": {"production": 1000, "preemptible": -100},
            "tenants": {"ml-research": {"weight": 2, "quotas": {H100: 16, "mig-1g.10gb": 14}}},
        },
    }
    policy = parse_fleet_config(raw, "clusters.yaml", tmp_path).settings.queue_policy()
    assert policy.priorities == {"production": 1000, "preemptible": -100}
    assert policy.tenants == {"ml-research": TenantPolicy(2.0, {H100: 16, "mig-1g.10gb": 14})}

    bad = {**raw, "settings": {"tenants": {"ml-research": {"quotas": {H100: -1}}}}}
    with pytest.raises(
        ConfigError, match=r"settings\.tenants\.ml-research\.quotas: H100-80GB: a quota must be >= 0"
    ):
        parse_fleet_config(bad, "clusters.yaml", tmp_path)
    bad = {**raw, "settings": {"tenants": {"ML": {}}}}
    with pytest.raises(ConfigError, match=r"settings\.tenants: 'ML': a tenant name is a DNS label"):
        parse_fleet_config(bad, "clusters.yaml", tmp_path)
