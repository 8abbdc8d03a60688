"""Level 2: the exact Job/PodGroup fields the broker writes for each kind of placement."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from broker.capacity import kube_objects
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.workload.manifest import build_workload, workload_name
from tests.unit.k8s_builders import pod

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PLAIN = ClusterTraits("onprem-a")


def whole(gpus: int = 4, pods: int = 1, **kw: Any) -> Placement:
    return Placement(
        cluster="onprem-a",
        product="H100-80GB",
        resource_name="nvidia.com/gpu",
        units_per_pod=gpus,
        pods=pods,
        score=80,
        gfd_products=("NVIDIA-H100-80GB-HBM3",),
        **kw,
    )


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def resources(manifest: dict[str, Any]) -> dict[str, Any]:
    res: dict[str, Any] = pod_spec(manifest)["containers"][0]["resources"]
    return res


@pytest.mark.parametrize(
    ("job_id", "attempt"),
    [
        ("01HZX3K9Q2", 0),
        ("01HZX3K9Q2", 7),
        ("job_with.odd/chars", 1),
        ("x" * 200, 3),
        ("---", 0),
        ("UPPER-lower-123", 12),
    ],
)
def test_workload_name_is_a_short_dns_label(job_id: str, attempt: int) -> None:
    name = workload_name(job_id, attempt)
    assert DNS_LABEL.match(name) and len(name) <= 52
    assert name.endswith(f"-{attempt}")
    assert workload_name(job_id, attempt) == name  # derived only from id and attempt


def test_workload_names_keep_ids_and_attempts_apart() -> None:
    names = {workload_name(i, a) for i in ("a.b", "a-b", "a_b", "x" * 100, "x" * 101) for a in (0, 1)}
    assert len(names) == 10
    assert workload_name("01hzx3", 2) == "gf-01hzx3-2"


def test_whole_gpu_job() -> None:
    job = JobRequest(
        "train",
        namespace="team-a",
        image="trainer:1",
        command=("python", "t.py"),
        priority_class="gpu-high",
        duration_seconds=90,
        labels={"team": "a"},
    )
    w = build_workload("J1", 2, job, whole(4), ClusterTraits("onprem-a", namespace="team-a"))
    m = w.job
    assert (m["apiVersion"], m["kind"], m["metadata"]["name"], m["metadata"]["namespace"]) == (
        "batch/v1",
        "Job",
        "gf-j1-2",
        "team-a",
    )
    ids = {"gpufed.io/job-id": "J1", "gpufed.io/attempt": "2"}
    assert m["metadata"]["labels"] == {"team": "a", **ids}
    assert m["spec"]["template"]["metadata"]["labels"] == {"team": "a", **ids}
    assert m["spec"]["template"]["metadata"]["annotations"] == {"sim.gpufed.io/duration-seconds": "90"}
    assert (m["spec"]["parallelism"], m["spec"]["completions"], m["spec"]["backoffLimit"]) == (1, 1, 0)
    assert "suspend" not in m["spec"] and "completionMode" not in m["spec"]
    spec = pod_spec(m)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "gpu-high" and spec["restartPolicy"] == "Never"
    assert "schedulerName" not in spec and "affinity" not in spec
    c = spec["containers"][0]
    assert (c["image"], c["command"]) == ("trainer:1", ["python", "t.py"])
    assert resources(m) == {
        "requests": {"cpu": "1000m", "memory": "1024Mi", "nvidia.com/gpu": "4"},
        "limits": {"memory": "1024Mi", "nvidia.com/gpu": "4"},
    }
    assert w.companions == ()


def test_requests_read_back_as_the_placement() -> None:
    w = build_workload("j", 0, JobRequest("t", cpu_millis_per_pod=1500), whole(2), PLAIN)
    reqs = kube_objects.pod_requests(pod(containers=pod_spec(w.job)["containers"]))
    assert (reqs["nvidia.com/gpu"], reqs["cpu"], reqs["memory"]) == (2, 1500, 1024 * 2**20)


def test_mig_mixed() -> None:
    placement = Placement(
        cluster="a",
        product="A100-80GB",
        resource_name="nvidia.com/mig-1g.10gb",
        units_per_pod=2,
        pods=1,
        score=50,
        mig_profile="1g.10gb",
        gfd_products=("NVIDIA-A100-SXM4-80GB",),
    )
    m = build_workload("j", 0, JobRequest("m", mig_profile="1g.10gb"), placement, PLAIN).job
    assert resources(m)["requests"]["nvidia.com/mig-1g.10gb"] == "2"
    assert resources(m)["limits"]["nvidia.com/mig-1g.10gb"] == "2"
    assert "nvidia.com/gpu" not in resources(m)["requests"]
    assert pod_spec(m)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_mig_single_uses_nvidia_gpu_with_the_mig_product_label() -> None:
    placement = Placement(
        cluster="a",
        product="A100-40GB",
        resource_name="nvidia.com/gpu",
        units_per_pod=1,
        pods=1,
        score=50,
        mig_profile="1g.5gb",
        gfd_products=("NVIDIA-A100-SXM4-40GB",),
    )
    m = build_workload("j", 0, JobRequest("m", mig_profile="1g.5gb"), placement, PLAIN).job
    assert resources(m)["limits"]["nvidia.com/gpu"] == "1"
    assert pod_spec(m)["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}


def test_product_with_several_gfd_strings_uses_required_affinity() -> None:
    placement = replace(whole(1), product="A100-80GB", gfd_products=())
    spec = pod_spec(build_workload("j", 0, JobRequest("t"), placement, PLAIN).job)
    assert "nodeSelector" not in spec
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    assert term["matchExpressions"] == [
        {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"],
        }
    ]


def test_numa_aligned_is_guaranteed_qos_with_whole_cpus_and_topology_scheduler() -> None:
    traits = ClusterTraits(
        "a", topology_scheduler="topo-aware-scheduler", gang_scheduler="scheduler-plugins-scheduler"
    )
    job = JobRequest("n", numa_aligned=True, cpu_millis_per_pod=3500, memory_mib_per_pod=8192)
    m = build_workload("j", 0, job, whole(4), traits).job
    expected = {"cpu": "4", "memory": "8192Mi", "nvidia.com/gpu": "4"}
    assert resources(m) == {"requests": expected, "limits": expected}
    assert pod_spec(m)["schedulerName"] == "topo-aware-scheduler"


def test_kueue_suspend_and_queue_label() -> None:
    traits = ClusterTraits("a", kueue_local_queue="gpu")
    m = build_workload("j", 0, JobRequest("k"), whole(1), traits).job
    assert m["spec"]["suspend"] is True
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"


def test_gang_gets_podgroup_indexed_job_and_gang_scheduler() -> None:
    traits = ClusterTraits("a", gang_scheduler="scheduler-plugins-scheduler", topology_scheduler="topo")
    job = JobRequest("g", pods=4, numa_aligned=True)
    w = build_workload("j", 1, job, whole(2, pods=4), traits)
    m = w.job
    assert (m["spec"]["parallelism"], m["spec"]["completions"], m["spec"]["completionMode"]) == (
        4,
        4,
        "Indexed",
    )
    assert pod_spec(m)["schedulerName"] == "scheduler-plugins-scheduler"
    assert m["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gf-j-1"
    (group,) = w.companions
    assert group == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "gf-j-1",
            "namespace": "default",
            "labels": {"gpufed.io/job-id": "j", "gpufed.io/attempt": "1"},
        },
        "spec": {"minMember": 4, "minResources": {"nvidia.com/gpu": "8"}},
    }


def test_gang_without_gang_scheduler_has_no_podgroup() -> None:
    w = build_workload("j", 0, JobRequest("g", pods=3), whole(1, pods=3), PLAIN)
    assert w.companions == ()
    assert "scheduling.x-k8s.io/pod-group" not in w.job["spec"]["template"]["metadata"]["labels"]
    assert w.job["spec"]["completionMode"] == "Indexed"


def test_spot_cluster_tolerates_spot_taints_and_preferred_nodes() -> None:
    traits = ClusterTraits("cloud", spot=True, namespace="gpufed")
    w = build_workload("j", 0, JobRequest("s"), whole(1, preferred_nodes=("n1", "n2")), traits)
    spec = pod_spec(w.job)
    keys = {t["key"] for t in spec["tolerations"]}
    assert keys == {"nvidia.com/gpu", *kube_objects.SPOT_TAINT_KEYS}
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [p["preference"]["matchExpressions"][0]["values"] for p in preferred] == [["n1"], ["n2"]]
    assert preferred[0]["weight"] > preferred[1]["weight"]
    assert w.namespace == "gpufed"  # the broker's namespace in that cluster


def test_whole_gpu_pods_use_the_topology_aware_scheduler_where_the_cluster_runs_one() -> None:
    """The default scheduler would bind an 8-GPU pod to a 4+4 single-numa-node node; the kubelet then
    refuses it. Where the cluster declares a topology-aware profile, every whole-GPU pod goes there."""
    traits = ClusterTraits("b", topology_scheduler="topo-aware-scheduler")
    job = JobRequest(name="t", gpus_per_pod=8)
    m = build_workload("j1", 1, job, whole(8), traits).job
    assert pod_spec(m)["schedulerName"] == "topo-aware-scheduler"
    mig = JobRequest(name="m", mig_profile="1g.10gb")
    mig_placement = replace(whole(1), resource_name="nvidia.com/mig-1g.10gb", mig_profile="1g.10gb")
    assert "schedulerName" not in pod_spec(build_workload("j2", 1, mig, mig_placement, traits).job)
