"""Level 2 on DRA clusters: a ResourceClaimTemplate instead of GPU limits (broker/workload/dra_claims.py)."""

from __future__ import annotations

from typing import Any

from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.workload.manifest import build_workload, workload_name
from kubesim.cel import compile_selector
from kubesim.dra import validate

DRA = ClusterTraits("dra-east", gpu_allocation="dra")


def placement(
    resource: str = "nvidia.com/gpu", units: int = 2, profile: str | None = None, **kw: Any
) -> Placement:
    fields: dict[str, Any] = {
        "cluster": "dra-east",
        "product": "H100-80GB",
        "resource_name": resource,
        "units_per_pod": units,
        "pods": 1,
        "score": 80,
        "mig_profile": profile,
        "gfd_products": ("NVIDIA H100 80GB HBM3",),
    }
    return Placement(**{**fields, **kw})


def request(template: dict[str, Any]) -> dict[str, Any]:
    req: dict[str, Any] = template["spec"]["spec"]["devices"]["requests"][0]
    return req


def test_whole_gpus_on_a_dra_cluster_are_claimed_not_requested() -> None:
    job = JobRequest(name="train", gpus_per_pod=2, min_gpu_memory_mib=80000)
    m = build_workload("j1", 1, job, placement(preferred_nodes=("dra-east-h100-0",)), DRA)
    name = workload_name("j1", 1)
    template, *_ = m.companions
    assert template["kind"] == "ResourceClaimTemplate" and template["apiVersion"] == "resource.k8s.io/v1"
    assert template["metadata"]["name"] == name and template["metadata"]["labels"]["gpufed.io/job-id"] == "j1"
    req = request(template)
    assert req["name"] == "gpus"
    assert req["exactly"]["deviceClassName"] == "gpu.nvidia.com" and req["exactly"]["count"] == 2
    exprs = [s["cel"]["expression"] for s in req["exactly"]["selectors"]]
    assert exprs == [
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80000Mi')) >= 0",
    ]
    for e in exprs:
        compile_selector(e)  # inside the subset kubesim evaluates
    assert validate("ResourceClaimTemplate", template) == []
    spec = m.job["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": name}]
    container = spec["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert "nodeSelector" not in spec  # DRA nodes have no GPU product label
    assert "preferredDuringSchedulingIgnoredDuringExecution" in spec["affinity"]["nodeAffinity"]


def test_mig_on_dra_nodes_is_claimed_from_the_mig_class_by_profile() -> None:
    job = JobRequest(name="infer", mig_profile="1g.10gb")
    m = build_workload("j2", 1, job, placement("mig.nvidia.com", 1, "1g.10gb"), ClusterTraits("dra-east"))
    req = request(m.companions[0])
    assert req["exactly"]["deviceClassName"] == "mig.nvidia.com" and req["exactly"]["count"] == 1
    assert (
        req["exactly"]["selectors"][0]["cel"]["expression"]
        == "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    )


def test_device_plugin_clusters_are_unchanged() -> None:
    job = JobRequest(name="train", gpus_per_pod=2)
    p = placement(gfd_products=("NVIDIA-H100-80GB-HBM3",))
    m = build_workload("j3", 1, job, p, ClusterTraits("plain"))
    assert m.companions == ()
    spec = m.job["spec"]["template"]["spec"]
    assert "resourceClaims" not in spec
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_gang_on_a_dra_cluster_keeps_gpus_out_of_the_pod_group() -> None:
    job = JobRequest(name="gang", gpus_per_pod=2, pods=2)
    traits = ClusterTraits("dra-east", gpu_allocation="dra", gang_scheduler="scheduler-plugins-scheduler")
    m = build_workload("j4", 1, job, placement(pods=2), traits)
    kinds = [c["kind"] for c in m.companions]
    assert kinds == ["ResourceClaimTemplate", "PodGroup"]
    assert "minResources" not in m.companions[1]["spec"]


def test_member_rbac_lets_the_broker_write_claim_templates() -> None:
    from broker.tenancy.rbac import member_rbac

    role = next(d for d in member_rbac("dra-east") if d["kind"] == "Role")
    assert any(
        "resource.k8s.io" in r["apiGroups"]
        and "resourceclaimtemplates" in r["resources"]
        and {"create", "delete", "get", "update"} <= set(r["verbs"])
        for r in role["rules"]
    )
