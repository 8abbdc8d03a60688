"""kubesim's ComputeDomain controller and gang admission: NVLink domains in one clique, Workload gangs."""

from __future__ import annotations

from typing import Any

from kubesim.controllers.computedomain import CHANNEL_CLASS, DOMAIN_DRIVER, DOMAIN_LABEL
from kubesim.controllers.gangs import COMPUTE_DOMAINS, WORKLOADS
from kubesim.dra import CLAIMS, TEMPLATES
from kubesim.store import Obj
from tests.unit.kubesim.world import World, bare_pod, pod_condition, pool, scheduled, world

RACK1 = "5b0e6a43-8f0c-4d0e-9a3c-1f2e3d4c5b6a.1"
RACK2 = "5b0e6a43-8f0c-4d0e-9a3c-1f2e3d4c5b6a.2"


def _nvl(rack1: int = 3, rack2: int = 3) -> World:
    return world(
        {
            "name": "nvl",
            "nodePools": [
                pool("rack1", rack1, "GB200", 4, labels={"nvidia.com/gpu.clique": RACK1}),
                pool("rack2", rack2, "GB200", 4, labels={"nvidia.com/gpu.clique": RACK2}),
            ],
        }
    )


def _domain(w: World, name: str, nodes: int) -> Obj:
    return w.store.create(
        COMPUTE_DOMAINS,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"numNodes": nodes, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
        },
    )


def _domain_pods(w: World, domain: str, n: int, gpus: int = 4, **spec: Any) -> list[str]:
    names = [f"{domain}-{i}" for i in range(n)]
    for name in names:
        w.store.create(
            "pods",
            bare_pod(
                name,
                {"nvidia.com/gpu": gpus},
                duration=3600,
                resourceClaims=[{"name": "imex-channel", "resourceClaimTemplateName": f"{domain}-channel"}],
                **spec,
            ),
        )
    return names


def _clique_of(w: World, pod: str) -> str:
    node = w.store.get("nodes", "", scheduled(w.pod(pod)))
    return str(node["metadata"]["labels"]["nvidia.com/gpu.clique"])


def test_the_driver_s_channel_template_is_made_for_a_domain_and_deleted_with_it() -> None:
    w = _nvl()
    cd = _domain(w, "train", 2)
    w.settle()
    template = w.store.get(TEMPLATES, "default", "train-channel")
    assert template["metadata"]["labels"] == {
        DOMAIN_LABEL: cd["metadata"]["uid"],
        "resource.nvidia.com/computeDomainTarget": "Workload",
    }
    devices = template["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["deviceClassName"] == CHANNEL_CLASS
    params = devices["config"][0]["opaque"]["parameters"]
    assert (params["kind"], params["domainID"]) == ("ComputeDomainChannelConfig", cd["metadata"]["uid"])
    assert w.store.get(COMPUTE_DOMAINS, "default", "train")["status"] == {"status": "NotReady"}

    w.store.delete(COMPUTE_DOMAINS, "default", "train")
    w.settle()
    assert w.store.find(TEMPLATES, "default", "train-channel") is None


def test_a_domain_s_pods_wait_rather_than_span_two_cliques() -> None:
    w = _nvl()  # 3 + 3 free nodes: 6 in the cluster, no clique takes 4
    _domain(w, "big", 4)
    pods = _domain_pods(w, "big", 4)
    w.settle()
    assert [scheduled(w.pod(p)) for p in pods] == ["", "", "", ""]
    message = pod_condition(w.pod(pods[0]), "PodScheduled")["message"]
    assert message == (
        '0/6 nodes are available: 6 cannot allocate all claims. computedomain "big": no NVLink clique '
        f"takes all 4 of its pods (best: 3 in {RACK2})."
    )
    assert not any((c.get("status") or {}).get("allocation") for c in w.store.list(CLAIMS)[0])
    assert w.store.get(COMPUTE_DOMAINS, "default", "big")["status"]["status"] == "NotReady"


def test_a_domain_runs_inside_one_clique_its_channels_allocated_and_its_status_ready() -> None:
    w = _nvl(rack1=4, rack2=3)
    w.store.create("pods", bare_pod("other", {"nvidia.com/gpu": 4}, duration=3600, nodeName="nvl-rack1-0"))
    _domain(w, "fit", 3)  # rack 1 has 3 free nodes left, rack 2 has 3: the first by name
    pods = _domain_pods(w, "fit", 3)
    w.settle()
    assert {_clique_of(w, p) for p in pods} == {RACK1}
    claims = [c for c in w.store.list(CLAIMS)[0] if c["metadata"]["labels"].get(DOMAIN_LABEL)]
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
    assert {(r["driver"], r["device"]) for r in results} == {(DOMAIN_DRIVER, "channel-0")}
    status = w.store.get(COMPUTE_DOMAINS, "default", "fit")["status"]
    assert status["status"] == "Ready"
    assert sorted((n["name"], n["cliqueID"], n["index"]) for n in status["nodes"]) == [
        (scheduled(w.pod(p)), RACK1, i) for i, p in enumerate(sorted(pods, key=lambda p: scheduled(w.pod(p))))
    ]

    # a second domain of 3: rack 1 is full, rack 2 takes it whole
    _domain(w, "next", 3)
    more = _domain_pods(w, "next", 3)
    w.settle()
    assert {_clique_of(w, p) for p in more} == {RACK2}


def _workload(w: World, name: str, min_count: int, policy: str = "gang") -> None:
    group: dict[str, Any] = {"name": "workers", "policy": {"gang": {"minCount": min_count}}}
    if policy == "basic":
        group["policy"] = {"basic": {}}
    w.store.create(
        WORKLOADS,
        {
            "apiVersion": "scheduling.k8s.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"podGroups": [group]},
        },
    )


def _gang_pods(w: World, workload: str, n: int, gpus: int = 4) -> list[str]:
    names = [f"{workload}-{i}" for i in range(n)]
    for name in names:
        ref = {"name": workload, "podGroup": "workers"}
        w.store.create("pods", bare_pod(name, {"nvidia.com/gpu": gpus}, duration=3600, workloadRef=ref))
    return names


def test_a_workload_gang_is_bound_whole_or_not_at_all() -> None:
    w = _nvl(rack1=2, rack2=0)
    pods = _gang_pods(w, "wl", 3)
    w.settle()
    assert pod_condition(w.pod(pods[0]), "PodScheduled")["message"] == (
        'waiting for pods\'s workload "wl" to appear in scheduling queue'
    )
    _workload(w, "wl", 3)  # 3 pods of a whole node each, 2 nodes: none binds
    w.settle()
    assert [scheduled(w.pod(p)) for p in pods] == ["", "", ""]
    assert "Insufficient nvidia.com/gpu" in pod_condition(w.pod(pods[2]), "PodScheduled")["message"]

    small = _gang_pods(w, "small", 2, gpus=2)  # minCount 3 with 2 pods: waits for its members
    _workload(w, "small", 3)
    w.settle()
    assert pod_condition(w.pod(small[0]), "PodScheduled")["message"] == (
        "waiting for minCount pods from a gang to appear in scheduling queue"
    )
    w.store.delete("pods", "default", pods[2])  # the big gang loses a member: 2 left, still < minCount
    _gang_pods(w, "fits", 2)
    _workload(w, "fits", 2)
    w.settle()
    assert all(scheduled(w.pod(p)) for p in ("fits-0", "fits-1"))
    assert not any(scheduled(w.pod(p)) for p in pods[:2])


def test_a_basic_pod_group_schedules_pod_by_pod() -> None:
    w = _nvl(rack1=2, rack2=0)
    pods = _gang_pods(w, "basic", 3)
    _workload(w, "basic", 0, policy="basic")
    w.settle()
    assert sorted(bool(scheduled(w.pod(p))) for p in pods) == [False, True, True]
