"""CapacityIndex gives exactly what rollup.summarize gives for the same nodes, after every change.

Nodes are built the way the informers build them (kube_objects.node_facts_from_requests over realistic node,
NodeResourceTopology and allocated-request dicts from the reference's shapes), drawn at random: whole-GPU
products, MIG single and mixed (settled or not), time-sliced GPUs, unknown products, NUMA zones under
each topology policy, GPU/spot/other taints, cordons and NotReady. Random upserts, removes and bad marks
are applied to the index, and after each step its summary is compared with summarize() of a snapshot of
the same nodes sorted by name.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from broker.capacity import kube_objects, rollup
from broker.capacity.index import CapacityIndex
from broker.core.model import ClusterSnapshot, ClusterTraits, Health, NodeFacts, QueueHeadroom, Tier
from tests.unit import k8s_builders as b

GPU = "nvidia.com/gpu"
WHOLE_GPU_LABELS = (b.H100, b.H200, b.A100_80, b.A100_40, b.L4)
TRAITS = ClusterTraits(
    name="onprem-a",
    tier=Tier.ONPREM,
    region="eu-west",
    price_per_gpu_hour={"H100-80GB": 2.5},
    labels={"a": "b"},
)
QUEUES = (QueueHeadroom("cq", "h100", GPU, 64, 8),)


def _taints(rng: random.Random) -> list[dict[str, str]] | None:
    choices = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "cloud.gpufed.io/spot", "value": "true", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "infra", "effect": "NoExecute"},
        {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
    ]
    if rng.random() < 0.5:
        return None
    return rng.sample(choices, rng.randint(1, 2))


def _nrt(rng: random.Random, name: str, gpus: int) -> dict[str, Any] | None:
    if rng.random() < 0.4:
        return None
    zones = rng.choice((1, 2, 4))
    per_zone = max(1, gpus // zones)
    avail = tuple(rng.randint(0, per_zone) for _ in range(zones))
    policy = rng.choice(("single-numa-node", "best-effort", "restricted", "none", None))
    return b.nrt(name, avail, per_zone, policy=policy, scope=rng.choice(("pod", "container")))


def random_facts(rng: random.Random, name: str) -> NodeFacts:
    """One realistic node as the informers would parse it."""
    kind = rng.choice(("whole", "whole", "whole", "mig-single", "mig-mixed", "shared", "unknown", "cpu"))
    labels: dict[str, str] = {"kubernetes.io/hostname": name}
    allocated: dict[str, int] = {"cpu": rng.randint(0, 90_000)}
    gpus = rng.choice((1, 2, 4, 8))
    if kind == "whole":
        labels.update(rng.choice(WHOLE_GPU_LABELS))
        labels["nvidia.com/gpu.count"] = str(gpus)
        alloc: dict[str, Any] = {GPU: str(rng.choice((0, gpus, gpus)))}
        allocated[GPU] = rng.randint(0, gpus + 1)  # a stale over-count happens during kubelet churn
    elif kind == "mig-single":
        labels.update(b.A100_80)
        profile = rng.choice(("1g.10gb", "2g.20gb", "3g.40gb", "INVALID"))
        labels["nvidia.com/gpu.product"] = f"NVIDIA-A100-SXM4-80GB-MIG-{profile}"
        labels["nvidia.com/mig.strategy"] = "single"
        labels["nvidia.com/mig.config.state"] = rng.choice(("success", "success", "pending"))
        slices = gpus * 7
        alloc = {GPU: str(slices)}
        allocated[GPU] = rng.randint(0, slices)
    elif kind == "mig-mixed":
        labels.update(rng.choice((b.A100_80, b.H100, b.H200)))
        labels["nvidia.com/mig.strategy"] = "mixed"
        labels["nvidia.com/mig.config.state"] = rng.choice(("success", "success", "pending"))
        alloc = {}
        for profile in rng.sample(("1g.10gb", "2g.20gb", "3g.40gb", "1g.10gb.me"), rng.randint(1, 3)):
            n = rng.randint(0, 14)
            alloc[f"nvidia.com/mig-{profile}"] = str(n)
            allocated[f"nvidia.com/mig-{profile}"] = rng.randint(0, n)
        if rng.random() < 0.3:
            alloc[GPU] = str(rng.randint(1, 4))
            allocated[GPU] = rng.randint(0, 1)
    elif kind == "shared":
        labels.update(b.H100)
        labels["nvidia.com/gpu.replicas"] = "4"
        labels["nvidia.com/gpu.product"] += rng.choice(("-SHARED", ""))
        alloc = {GPU: str(gpus * 4)}
        allocated[GPU] = rng.randint(0, gpus * 4)
    elif kind == "unknown":  # GPUs without GFD's product label; memory varies by node
        labels["nvidia.com/gpu.memory"] = rng.choice(("16384", "24576"))
        alloc = {GPU: str(gpus)}
        allocated[GPU] = rng.randint(0, gpus)
    else:
        alloc = {}
    node = b.node(
        name,
        labels,
        alloc,
        ready=rng.random() < 0.85,
        unschedulable=rng.choice((None, False, True)) if rng.random() < 0.3 else None,
        taints=_taints(rng),
    )
    return kube_objects.node_facts_from_requests(node, allocated, _nrt(rng, name, gpus))


def expected(
    facts: dict[str, NodeFacts], bad: set[str], traits: ClusterTraits, health: Health, hb: float
) -> Any:
    snapshot = ClusterSnapshot(
        cluster=traits.name,
        nodes=tuple(facts[n] for n in sorted(facts)),
        queues=QUEUES,
        bad_nodes=tuple(sorted(bad)),
    )
    return rollup.summarize(snapshot, traits, health, hb)


@pytest.mark.parametrize("seed", range(12))
def test_random_changes_keep_the_index_equal_to_summarize(seed: int) -> None:
    rng = random.Random(seed)
    traits = TRAITS if seed % 2 == 0 else ClusterTraits(name="onprem-a", spot=True)
    index = CapacityIndex("onprem-a", spot=traits.spot)
    facts: dict[str, NodeFacts] = {}
    bad: set[str] = set()
    names = [f"gpu-node-{i:03d}" for i in range(30)]
    for step in range(250):
        name = rng.choice(names)
        op = rng.random()
        if op < 0.7:
            f = random_facts(rng, name)
            index.upsert(f)
            facts[name] = f
            bad.discard(name)
        elif op < 0.85:
            index.remove(name)
            facts.pop(name, None)
            bad.discard(name)
        else:
            index.mark_bad(name)
            facts.pop(name, None)
            bad.add(name)
        got = index.summary(traits, Health.HEALTHY, float(step), QUEUES)
        assert got == expected(facts, bad, traits, Health.HEALTHY, float(step)), f"seed {seed} step {step}"
    assert len(index) == len(facts)
    assert index.bad_nodes == tuple(sorted(bad))
    assert index.nodes() == tuple(facts[n] for n in sorted(facts))


def test_a_spot_declaration_changes_what_counts_as_free() -> None:
    rng = random.Random(99)
    index = CapacityIndex("cloud-burst")
    facts = {}
    for i in range(40):
        f = random_facts(rng, f"n{i:02d}")
        facts[f.name] = f
        index.upsert(f)
    spot = ClusterTraits(name="cloud-burst", tier=Tier.CLOUD, spot=True)
    assert index.summary(spot, Health.DEGRADED, 5.0) == rollup.summarize(
        ClusterSnapshot("cloud-burst", tuple(facts[n] for n in sorted(facts))), spot, Health.DEGRADED, 5.0
    )
    plain = ClusterTraits(name="cloud-burst")
    assert index.summary(plain, Health.HEALTHY, 6.0) == rollup.summarize(
        ClusterSnapshot("cloud-burst", tuple(facts[n] for n in sorted(facts))), plain, Health.HEALTHY, 6.0
    )


def test_each_numa_zone_is_a_domain_under_single_numa_node() -> None:
    node = b.node("n1", dict(b.H100), {GPU: "8"})
    index = CapacityIndex("c")
    index.upsert(kube_objects.node_facts_from_requests(node, {GPU: 2}, b.nrt("n1", (4, 2), 4)))
    h100 = index.summary(ClusterTraits(name="c"), Health.HEALTHY, 0.0).product("H100-80GB")
    assert h100 is not None
    assert h100.free == 6
    assert h100.nodes_by_free == (0, 0, 1, 0, 1)  # zones of 2 and 4 free, not one node of 6
    assert h100.numa_blocks == (0, 0, 0, 0, 1)


def test_a_changed_node_replaces_its_old_contribution_and_a_removed_one_leaves_nothing() -> None:
    index = CapacityIndex("c")
    traits = ClusterTraits(name="c")
    node = b.node("n1", dict(b.H100), {GPU: "8"})
    index.upsert(kube_objects.node_facts_from_requests(node, {GPU: 1}, None))
    index.upsert(kube_objects.node_facts_from_requests(node, {GPU: 5}, None))
    h100 = index.summary(traits, Health.HEALTHY, 0.0).product("H100-80GB")
    assert h100 is not None
    assert (h100.allocated, h100.free, h100.nodes_by_free) == (5, 3, (0, 0, 0, 1))
    index.remove("n1")
    empty = index.summary(traits, Health.HEALTHY, 0.0)
    assert (empty.products, empty.nodes_total, empty.nodes_ready) == ((), 0, 0)
