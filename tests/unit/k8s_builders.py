"""Builders of realistic Kubernetes object dicts (shapes from reference sections 1-5) for the unit tables."""

from __future__ import annotations

from typing import Any

from broker.core.model import (
    ClusterSummary,
    Health,
    MigCapacity,
    ProductCapacity,
    QueueHeadroom,
    Tier,
)

H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/gpu.present": "true",
}
# The real H200 host in /work/shared/fixtures/gpu-host-h200: one "NVIDIA H200", 143771 MiB, cc 9.0.
H200 = {
    "nvidia.com/gpu.product": "NVIDIA-H200",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": "143771",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/cuda.driver-version.full": "580.159.04",
}
A100_80 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/mig.capable": "true",
}
A100_40 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/mig.capable": "true",
}
L4 = {
    "nvidia.com/gpu.product": "NVIDIA-L4",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.memory": "23034",
    "nvidia.com/gpu.family": "ada-lovelace",
    "nvidia.com/mig.capable": "false",
}


def node(
    name: str = "gpu-node-01",
    labels: dict[str, str] | None = None,
    allocatable: dict[str, Any] | None = None,
    *,
    ready: bool = True,
    unschedulable: bool | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", "ephemeral-storage": "1800Gi"}
    alloc.update(allocatable if allocatable is not None else {"nvidia.com/gpu": "8"})
    spec: dict[str, Any] = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    if taints is not None:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels if labels is not None else H100)},
        },
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"},
            ],
        },
    }


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": extra.pop("name", "c"), "image": "busybox:1.36", "resources": resources, **extra}


def pod(
    name: str = "p",
    containers: list[dict[str, Any]] | None = None,
    *,
    node_name: str | None = "gpu-node-01",
    phase: str = "Running",
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers if containers is not None else [container()]}
    if node_name is not None:
        spec["nodeName"] = node_name
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T22:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def gpu_pod(
    gpus: int, name: str = "p", node_name: str = "gpu-node-01", phase: str = "Running"
) -> dict[str, Any]:
    return pod(
        name, [container({"cpu": "4"}, {"nvidia.com/gpu": str(gpus)})], node_name=node_name, phase=phase
    )


def nrt(
    name: str = "gpu-node-01",
    gpus_available: tuple[int, ...] = (4, 4),
    gpus_per_zone: int = 4,
    *,
    policy: str | None = "single-numa-node",
    scope: str | None = "pod",
    legacy: list[str] | None = None,
) -> dict[str, Any]:
    attributes = []
    if policy is not None:
        attributes.append({"name": "topologyManagerPolicy", "value": policy})
    if scope is not None:
        attributes.append({"name": "topologyManagerScope", "value": scope})
    obj: dict[str, Any] = {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "attributes": attributes,
        "zones": [
            {
                "name": f"node-{i}",
                "type": "Node",
                "costs": [
                    {"name": f"node-{j}", "value": 10 if i == j else 20} for j in range(len(gpus_available))
                ],
                "resources": [
                    {"name": "cpu", "capacity": "64", "allocatable": "62", "available": "30"},
                    {"name": "memory", "capacity": "540Gi", "allocatable": "520Gi", "available": "300Gi"},
                    {
                        "name": "nvidia.com/gpu",
                        "capacity": str(gpus_per_zone),
                        "allocatable": str(gpus_per_zone),
                        "available": str(avail),
                    },
                ],
            }
            for i, avail in enumerate(gpus_available)
        ],
    }
    if legacy is not None:
        obj["topologyPolicies"] = legacy
    return obj


def cluster_queue(
    *,
    version: str = "v1beta2",
    nominal: str = "64",
    borrowing: str | None = "16",
    reserved: str | None = "40",
    used: str | None = "32",
    flavor: str = "h100-80gb",
) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "512"},
                            {"name": "memory", "nominalQuota": "4Ti"},
                            gpu,
                        ],
                    }
                ],
            }
        ],
    }
    spec["cohortName" if version == "v1beta2" else "cohort"] = "research"
    status: dict[str, Any] = {"conditions": [{"type": "Active", "status": "True"}]}
    if reserved is not None:
        status["flavorsReservation"] = [
            {"name": flavor, "resources": [{"name": "nvidia.com/gpu", "total": reserved, "borrowed": "0"}]}
        ]
    if used is not None:
        status["flavorsUsage"] = [
            {"name": flavor, "resources": [{"name": "nvidia.com/gpu", "total": used, "borrowed": "0"}]}
        ]
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu-cq"},
        "spec": spec,
        "status": status,
    }


# --------------------------------------------------------------------------- summaries


def product(
    name: str = "H100-80GB",
    nodes_by_free: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 0, 0, 2),
    *,
    numa_blocks: tuple[int, ...] | None = None,
    memory_mib: int = 81559,
    per_node: int = 8,
    gfd: tuple[str, ...] = ("NVIDIA-H100-80GB-HBM3",),
) -> ProductCapacity:
    nodes = sum(nodes_by_free)
    free = sum(k * n for k, n in enumerate(nodes_by_free))
    return ProductCapacity(
        product=name,
        memory_mib=memory_mib,
        total=nodes * per_node,
        allocatable=nodes * per_node,
        allocated=nodes * per_node - free,
        free=free,
        nodes_by_free=nodes_by_free,
        numa_blocks=numa_blocks if numa_blocks is not None else nodes_by_free,
        nodes=nodes,
        gfd_products=gfd,
    )


def mig(
    product_name: str = "A100-80GB",
    profile: str = "1g.10gb",
    free: int = 14,
    largest: int = 7,
    *,
    resource: str | None = None,
    settled: bool = True,
    gfd: tuple[str, ...] = ("NVIDIA-A100-SXM4-80GB",),
) -> MigCapacity:
    return MigCapacity(
        product=product_name,
        profile=profile,
        resource_name=resource or "nvidia.com/mig-" + profile.replace("+", "."),
        allocatable=max(free, 14),
        free=free,
        largest_free_on_node=largest,
        settled=settled,
        gfd_products=gfd,
    )


def summary(
    cluster: str,
    *products: ProductCapacity,
    tier: Tier = Tier.ONPREM,
    heartbeat: float = 1000.0,
    health: Health = Health.HEALTHY,
    migs: tuple[MigCapacity, ...] = (),
    price: dict[str, float] | None = None,
    queues: tuple[QueueHeadroom, ...] = (),
) -> ClusterSummary:
    return ClusterSummary(
        cluster=cluster,
        tier=tier,
        health=health,
        heartbeat=heartbeat,
        products=products,
        mig=migs,
        price_per_gpu_hour=price or {},
        queues=queues,
    )
