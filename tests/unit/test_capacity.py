"""capacity: pods' effective requests, nodes -> NodeFacts (every GPU shape), Kueue headroom, summaries."""

from __future__ import annotations

from typing import Any

import pytest

from broker.capacity import kube_objects, rollup
from broker.core.errors import MalformedObject
from broker.core.model import (
    ClusterSnapshot,
    ClusterTraits,
    Health,
    MigSlices,
    MigStrategy,
    NodeFacts,
    Taint,
)
from tests.unit.k8s_builders import A100_40, A100_80, H100, H200, L4, container, gpu_pod, node, nrt, pod

GI = 2**30

# --------------------------------------------------------------------------- pods


@pytest.mark.parametrize(
    ("case", "obj", "expected"),
    [
        (
            "containers summed",
            pod(
                containers=[
                    container({"cpu": "500m", "memory": "1Gi"}),
                    container({"cpu": "1", "memory": "2Gi"}),
                ]
            ),
            {"cpu": 1500, "memory": 3 * GI},
        ),
        (
            "GPU limit alone sets the request",
            pod(containers=[container({"cpu": "2"}, {"nvidia.com/gpu": "4"})]),
            {"cpu": 2000, "nvidia.com/gpu": 4},
        ),
        (
            "init container max",
            pod(containers=[container({"cpu": "1"})], init=[container({"cpu": "3", "memory": "1Gi"})]),
            {"cpu": 3000, "memory": GI},
        ),
        (
            "sidecar added to containers and to later init containers",
            pod(
                containers=[container({"cpu": "1"})],
                init=[container({"cpu": "500m"}, restartPolicy="Always"), container({"cpu": "2"})],
            ),
            {"cpu": 2500},
        ),
        (
            "sidecar added when init is small",
            pod(
                containers=[container({"cpu": "1"})],
                init=[container({"cpu": "100m"}), container({"cpu": "500m"}, restartPolicy="Always")],
            ),
            {"cpu": 1500},
        ),
        (
            "overhead added",
            pod(containers=[container({"cpu": "1"})], overhead={"cpu": "250m", "memory": "120Mi"}),
            {"cpu": 1250, "memory": 120 * 2**20},
        ),
        (
            "MIG mixed resource",
            pod(containers=[container(None, {"nvidia.com/mig-1g.10gb": "2"})]),
            {"nvidia.com/mig-1g.10gb": 2},
        ),
        ("no resources", pod(containers=[container()]), {}),
    ],
)
def test_pod_requests(case: str, obj: dict[str, Any], expected: dict[str, int]) -> None:
    assert kube_objects.pod_requests(obj) == expected, case


def test_pod_requests_names_a_bad_quantity() -> None:
    with pytest.raises(MalformedObject) as err:
        kube_objects.pod_requests(pod(containers=[container({"cpu": "lots"})]))
    assert err.value.field == "spec.containers[0].resources.requests[cpu]"


@pytest.mark.parametrize(
    ("obj", "active"),
    [
        (pod(phase="Running"), True),
        (pod(phase="Pending"), True),
        (pod(phase="Unknown"), True),
        (pod(phase="Running", deleting=True), True),
        (pod(phase="Succeeded"), False),
        (pod(phase="Failed"), False),
        (pod(phase="Pending", node_name=None), False),
    ],
)
def test_pod_is_active(obj: dict[str, Any], active: bool) -> None:
    assert kube_objects.pod_is_active(obj) is active


# --------------------------------------------------------------------------- nodes


def facts(
    n: dict[str, Any], pods: list[dict[str, Any]] | None = None, topo: dict[str, Any] | None = None
) -> NodeFacts:
    return kube_objects.node_facts(n, pods or [], topo)


def test_whole_gpus_count_active_pods_only() -> None:
    pods = [gpu_pod(2, "a"), gpu_pod(1, "b", phase="Pending"), gpu_pod(4, "done", phase="Succeeded")]
    f = facts(node(), pods)
    assert f.product is not None and (f.product.name, f.product.memory_mib, f.product.family) == (
        "H100-80GB",
        81559,
        "hopper",
    )
    assert (f.gpu_count, f.gpus_allocatable, f.gpus_allocated, f.gpus_free) == (8, 8, 3, 5)
    assert (f.cpu_allocatable_millis, f.cpu_allocated_millis) == (96_000, 8000)
    assert f.memory_allocatable_bytes == 2**40
    assert f.mig_strategy is MigStrategy.NONE and f.schedulable


def test_real_h200_host() -> None:
    f = facts(node("h200", H200, {"nvidia.com/gpu": "1"}))
    assert f.product is not None and (f.product.name, f.product.memory_mib) == ("H200-141GB", 143771)
    assert (f.gpu_count, f.gpus_free) == (1, 1)


def test_cpu_only_node_has_no_product() -> None:
    f = facts(node("cpu-1", {"kubernetes.io/os": "linux"}, {}))
    assert f.product is None and f.gpus_allocatable == 0


MIXED_LABELS = {
    **H100,
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-balanced",
    "nvidia.com/mig.config.state": "success",
    "nvidia.com/mig-1g.10gb.count": "16",
    "nvidia.com/mig-2g.20gb.count": "8",
    "nvidia.com/mig-3g.40gb.count": "8",
}
MIXED_ALLOC = {"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-3g.40gb": "8"}


def test_mig_mixed() -> None:
    used = pod(containers=[container(None, {"nvidia.com/mig-1g.10gb": "3"})])
    f = facts(node(labels=MIXED_LABELS, allocatable=MIXED_ALLOC), [used])
    assert f.mig_strategy is MigStrategy.MIXED and f.mig_settled
    assert f.gpus_allocatable == 0 and f.gpu_count == 8
    assert set(f.mig) == {
        MigSlices("1g.10gb", 16, 3),
        MigSlices("2g.20gb", 8, 0),
        MigSlices("3g.40gb", 8, 0),
    }


def test_mig_mixed_keeps_non_mig_gpus_whole_and_reads_media_profiles() -> None:
    alloc = {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-1g.10gb.me": "1", "nvidia.com/gpu": "6"}
    f = facts(node(labels={**A100_80, "nvidia.com/mig.strategy": "mixed"}, allocatable=alloc))
    assert f.gpus_allocatable == 6
    assert {s.profile for s in f.mig} == {"1g.10gb", "1g.10gb+me"}


@pytest.mark.parametrize("state", ["pending", "rebooting", "failed"])
def test_mig_reconfiguring_is_not_settled(state: str) -> None:
    labels = {**MIXED_LABELS, "nvidia.com/mig.config.state": state}
    assert not facts(node(labels=labels, allocatable=MIXED_ALLOC)).mig_settled


def test_mig_single_slices_are_not_whole_gpus() -> None:
    labels = {
        **A100_40,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.count": "56",
        "nvidia.com/gpu.memory": "4864",
        "nvidia.com/mig.config.state": "success",
    }
    f = facts(node(labels=labels, allocatable={"nvidia.com/gpu": "56"}), [gpu_pod(5)])
    assert f.product is not None and (f.product.name, f.product.memory_mib) == ("A100-40GB", 40960)
    assert f.mig_strategy is MigStrategy.SINGLE
    assert f.gpus_allocatable == 0 and f.gpu_count == 8
    assert f.mig == (MigSlices("1g.5gb", 56, 5),)


def test_mig_single_invalid_offers_nothing() -> None:
    labels = {
        **A100_80,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-INVALID",
        "nvidia.com/gpu.count": "0",
        "nvidia.com/gpu.memory": "0",
    }
    f = facts(node(labels=labels, allocatable={"nvidia.com/gpu": "0"}))
    assert f.product is not None and f.product.name == "A100-80GB"
    assert (f.gpus_allocatable, f.mig, f.mig_settled) == (0, (), False)


def test_single_strategy_without_mig_enabled_is_whole_gpus() -> None:
    f = facts(node(labels={**H100, "nvidia.com/mig.strategy": "single"}))
    assert (f.gpus_allocatable, f.mig) == (8, ())


@pytest.mark.parametrize(
    ("labels", "alloc", "replicas", "shared"),
    [
        (
            {
                **H100,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
                "nvidia.com/gpu.replicas": "10",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            },
            {"nvidia.com/gpu": "80"},
            10,
            80,
        ),
        (
            {**H100, "nvidia.com/gpu.replicas": "10", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
            {"nvidia.com/gpu.shared": "80"},
            10,
            80,
        ),
        ({**L4, "nvidia.com/gpu.replicas": "4"}, {"nvidia.com/gpu": "16"}, 4, 16),
    ],
)
def test_time_slicing_is_shared_not_whole(
    labels: dict[str, str], alloc: dict[str, str], replicas: int, shared: int
) -> None:
    f = facts(node(labels=labels, allocatable=alloc), [gpu_pod(1)])
    assert f.gpus_allocatable == 0
    assert (f.shared_replicas, f.shared_allocatable, f.shared_allocated) == (replicas, shared, 1)
    assert f.product is not None and f.product.known


@pytest.mark.parametrize(
    ("topo", "policy", "scope"),
    [
        (nrt(), "single-numa-node", "pod"),
        (nrt(policy="restricted", scope=None), "restricted", "container"),
        (nrt(policy=None, scope=None, legacy=["SingleNUMANodePodLevel"]), "single-numa-node", "pod"),
        (
            nrt(policy=None, scope=None, legacy=["SingleNUMANodeContainerLevel"]),
            "single-numa-node",
            "container",
        ),
        (nrt(policy=None, scope=None, legacy=["BestEffort"]), "best-effort", "container"),
        (nrt(policy=None, scope=None), "none", "container"),
    ],
)
def test_numa_policy_and_scope(topo: dict[str, Any], policy: str, scope: str) -> None:
    f = facts(node(), [], topo)
    assert (f.topology_policy, f.topology_scope) == (policy, scope)


def test_numa_zones_from_nrt() -> None:
    topo = nrt(gpus_available=(1, 4))
    topo["zones"].append({"name": "socket-0", "type": "Socket", "resources": []})
    f = facts(node(), [gpu_pod(3)], topo)
    assert [(z.name, z.gpus_allocatable, z.gpus_available, z.cpu_available_millis) for z in f.numa_zones] == [
        ("node-0", 4, 1, 30_000),
        ("node-1", 4, 4, 30_000),
    ]
    assert f.largest_numa_gpu_block == 4


def test_cordon_taints_and_readiness() -> None:
    taints = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ]
    f = facts(node(unschedulable=True, taints=taints, ready=False))
    assert f.unschedulable and not f.ready and not f.schedulable
    assert f.taints == (
        Taint("nvidia.com/gpu", "NoSchedule", "present"),
        Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
    )


def test_node_without_conditions_is_not_ready() -> None:
    n = node()
    del n["status"]["conditions"]
    assert not facts(n).ready


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (
            lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.count": "eight"}),
            "metadata.labels[nvidia.com/gpu.count]",
        ),
        (
            lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.memory": "-1"}),
            "metadata.labels[nvidia.com/gpu.memory]",
        ),
        (
            lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.replicas": 2}),
            "metadata.labels[nvidia.com/gpu.replicas]",
        ),
        (
            lambda n: n["metadata"]["labels"].update({"nvidia.com/mig.strategy": "half"}),
            "metadata.labels[nvidia.com/mig.strategy]",
        ),
        (
            lambda n: n["metadata"]["labels"].update(
                {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-big"}
            ),
            "metadata.labels[nvidia.com/gpu.product]",
        ),
        (
            lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "8x"}),
            "status.allocatable[nvidia.com/gpu]",
        ),
        (lambda n: n["status"]["allocatable"].update({"memory": "lots"}), "status.allocatable[memory]"),
        (lambda n: n["spec"].update({"taints": [{"effect": "NoSchedule"}]}), "spec.taints[0].key"),
        (
            lambda n: n["spec"].update({"taints": [{"key": "k", "effect": "Sometimes"}]}),
            "spec.taints[0].effect",
        ),
        (lambda n: n["spec"].update({"unschedulable": "yes"}), "spec.unschedulable"),
        (lambda n: n["status"].update({"allocatable": ["nvidia.com/gpu"]}), "status.allocatable"),
        (lambda n: n["metadata"].pop("name"), "metadata.name"),
    ],
)
def test_malformed_node_names_the_field(mutate: Any, field: str) -> None:
    n = node("bad-node")
    mutate(n)
    with pytest.raises(MalformedObject) as err:
        facts(n)
    assert err.value.field == field
    assert field in str(err.value)


def test_malformed_nrt_names_the_field() -> None:
    topo = nrt()
    topo["zones"][1]["resources"][2]["available"] = "four"
    with pytest.raises(MalformedObject) as err:
        facts(node(), [], topo)
    assert err.value.field == "zones[1].resources[2].available"


def test_incremental_requests_match_pod_list() -> None:
    pods = [gpu_pod(2, "a"), gpu_pod(1, "b")]
    summed: dict[str, int] = {}
    for p in pods:
        for k, v in kube_objects.pod_requests(p).items():
            summed[k] = summed.get(k, 0) + v
    assert kube_objects.node_facts_from_requests(node(), summed, None) == facts(node(), pods)


def test_a_node_parsed_once_follows_its_pods_and_a_new_version_of_the_node() -> None:
    """The watcher's cache parses a node once per object: new requests move the facts at once, and a
    node replaced by an event (cordoned here) or a new NRT is parsed again, never served stale."""
    cache = kube_objects.NodePartsCache()
    first, topo = node(), nrt()
    assert cache.facts(
        "gpu-node-01", first, {"nvidia.com/gpu": 2}, topo
    ) == kube_objects.node_facts_from_requests(first, {"nvidia.com/gpu": 2}, topo)
    assert cache.facts("gpu-node-01", first, {"nvidia.com/gpu": 5, "cpu": 4000}, topo).gpus_free == 3
    cordoned = node(unschedulable=True)
    assert not cache.facts("gpu-node-01", cordoned, {}, topo).schedulable
    assert cache.facts("gpu-node-01", cordoned, {}, None).numa_zones == ()
    cache.forget("gpu-node-01")  # the node was deleted: a node of that name later is parsed afresh
    assert cache.facts("gpu-node-01", node(), {}, None).schedulable


# --------------------------------------------------------------------------- Kueue


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_queue_headroom_from_reservation(version: str) -> None:
    from tests.unit.k8s_builders import cluster_queue

    rows = kube_objects.queue_headroom(cluster_queue(version=version))
    gpu = next(q for q in rows if q.resource == "nvidia.com/gpu")
    assert (gpu.cluster_queue, gpu.flavor, gpu.nominal, gpu.used, gpu.borrowing_limit, gpu.headroom) == (
        "gpu-cq",
        "h100-80gb",
        64,
        40,
        16,
        24,
    )
    cpu = next(q for q in rows if q.resource == "cpu")
    assert cpu.nominal == 512_000  # millicores
    memory = next(q for q in rows if q.resource == "memory")
    assert memory.nominal == 4 * 2**40


def test_queue_headroom_falls_back_to_usage_and_to_zero() -> None:
    from tests.unit.k8s_builders import cluster_queue

    usage_only = kube_objects.queue_headroom(cluster_queue(reserved=None, used="8", borrowing=None))
    gpu = next(q for q in usage_only if q.resource == "nvidia.com/gpu")
    assert (gpu.used, gpu.borrowing_limit) == (8, None)
    fresh = kube_objects.queue_headroom(cluster_queue(reserved=None, used=None))
    assert next(q for q in fresh if q.resource == "nvidia.com/gpu").used == 0


def test_queue_headroom_names_bad_quota() -> None:
    from tests.unit.k8s_builders import cluster_queue

    with pytest.raises(MalformedObject) as err:
        kube_objects.queue_headroom(cluster_queue(nominal="sixty"))
    assert err.value.field == "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota"


# --------------------------------------------------------------------------- summaries


def snapshot(*nodes: NodeFacts, bad: tuple[str, ...] = ()) -> ClusterSnapshot:
    return ClusterSnapshot(cluster="onprem-a", nodes=nodes, bad_nodes=bad)


def summarize(snap: ClusterSnapshot, traits: ClusterTraits | None = None) -> Any:
    return rollup.summarize(snap, traits or ClusterTraits("onprem-a"), Health.HEALTHY, 123.0)


def test_summary_histograms() -> None:
    nodes = [
        facts(node("n1")),  # 8 free
        facts(node("n2"), [gpu_pod(2, node_name="n2")]),  # 6 free
        facts(node("n3"), [gpu_pod(8, node_name="n3")]),  # 0 free
        facts(node("n4"), [gpu_pod(2, node_name="n4")], nrt("n4", (2, 4))),  # 6 free, best NUMA block 4
        facts(node("n5", ready=False)),  # not ready: total only
        facts(node("n6", unschedulable=True)),  # cordoned: total only
        facts(node("cpu", {}, {})),
    ]
    s = summarize(snapshot(*nodes, bad=("broken",)))
    (h100,) = s.products
    assert (h100.product, h100.total, h100.allocatable, h100.allocated, h100.free) == (
        "H100-80GB",
        48,
        32,
        12,
        20,
    )
    # n4 runs single-numa-node: its zones (2 and 4 free) are separate placement domains
    assert h100.nodes_by_free == (1, 0, 1, 0, 1, 0, 1, 0, 1)
    assert h100.numa_blocks == (1, 0, 0, 0, 1, 0, 1, 0, 1)
    assert h100.max_free_on_one_node == 8
    assert h100.pods_that_fit(4) == 4  # 8 -> 2, 6 -> 1, 6 -> 1
    assert h100.nodes_with_numa_block(6) == 2
    assert h100.gfd_products == ("NVIDIA-H100-80GB-HBM3",)
    assert (s.nodes_total, s.nodes_ready, s.bad_nodes, s.heartbeat, s.health) == (
        7,
        6,
        1,
        123.0,
        Health.HEALTHY,
    )


def test_summary_excludes_untolerated_taints_and_tolerates_spot_on_spot_clusters() -> None:
    spot = [{"key": "cloud.gpufed.io/spot", "value": "true", "effect": "NoSchedule"}]
    gpu = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    other = [{"key": "maintenance", "effect": "NoExecute"}]
    soft = [{"key": "maintenance", "effect": "PreferNoSchedule"}]
    nodes = (
        facts(node("spot", taints=spot)),
        facts(node("gpu", taints=gpu)),
        facts(node("other", taints=other)),
        facts(node("soft", taints=soft)),
    )
    assert summarize(snapshot(*nodes)).products[0].nodes == 2
    assert summarize(snapshot(*nodes), ClusterTraits("onprem-a", spot=True)).products[0].nodes == 3


def test_summary_mig_free_counts_settled_nodes_only() -> None:
    pending = {**MIXED_LABELS, "nvidia.com/mig.config.state": "pending"}
    used = pod(containers=[container(None, {"nvidia.com/mig-1g.10gb": "10"})], node_name="m1")
    nodes = (
        facts(node("m1", MIXED_LABELS, MIXED_ALLOC), [used]),
        facts(node("m2", MIXED_LABELS, MIXED_ALLOC)),
        facts(node("m3", pending, MIXED_ALLOC)),
    )
    s = summarize(snapshot(*nodes))
    one = next(m for m in s.mig if m.profile == "1g.10gb")
    assert (
        one.product,
        one.resource_name,
        one.allocatable,
        one.free,
        one.largest_free_on_node,
        one.settled,
    ) == (
        "H100-80GB",
        "nvidia.com/mig-1g.10gb",
        48,
        22,
        16,
        False,
    )
    assert one.gfd_products == ("NVIDIA-H100-80GB-HBM3",)
    assert s.products[0].total == 24 and s.products[0].allocatable == 0


def test_summary_mig_single_resource_is_nvidia_gpu() -> None:
    labels = {
        **A100_40,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.count": "56",
    }
    s = summarize(snapshot(facts(node("s1", labels, {"nvidia.com/gpu": "56"}))))
    (m,) = s.mig
    assert (m.product, m.profile, m.resource_name, m.free, m.gfd_products) == (
        "A100-40GB",
        "1g.5gb",
        "nvidia.com/gpu",
        56,
        ("NVIDIA-A100-SXM4-40GB",),
    )


def test_summary_carries_traits() -> None:
    traits = ClusterTraits(
        "onprem-a", region="eu-west", price_per_gpu_hour={"H100-80GB": 2.5}, labels={"a": "b"}
    )
    s = summarize(snapshot(facts(node())), traits)
    assert (s.region, s.price_per_gpu_hour, s.labels) == ("eu-west", {"H100-80GB": 2.5}, {"a": "b"})


def test_single_numa_node_policy_splits_a_node_into_zone_domains_for_whole_gpu_fit() -> None:
    """8 free GPUs split 4+4 across zones under single-numa-node can't take an 8-GPU pod (the kubelet
    answers TopologyAffinityError), but takes two 4-GPU pods."""
    from broker.capacity.kube_objects import node_facts
    from broker.capacity.rollup import summarize
    from broker.core.model import ClusterSnapshot, ClusterTraits, Health

    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}
    facts = node_facts(node("n1", labels), [], nrt("n1", (4, 4), policy="single-numa-node"))
    summary = summarize(ClusterSnapshot("c", (facts,)), ClusterTraits("c"), Health.HEALTHY, 1.0)
    h100 = summary.products[0]
    assert h100.free == 8
    assert h100.pods_that_fit(8) == 0
    assert h100.pods_that_fit(4) == 2
    assert h100.nodes == 1
