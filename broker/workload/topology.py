"""Level 2 above the node: pods pinned to the chosen NVLink clique, and a ComputeDomain for the job.

Owns what the broker writes for a placement that carries an NVLink clique (docs/topology.md):
- a required node affinity on the GFD label `nvidia.com/gpu.clique` In [<the clique>], ANDed into every
  node selector term the pod already has, so the member's scheduler keeps the gang inside that rack;
- on clusters declared `computeDomains` (the NVIDIA DRA driver's ComputeDomain support), one
  `resource.nvidia.com/v1beta1` ComputeDomain per attempt, named like the Job, whose channel
  ResourceClaimTemplate (`<name>-channel`, made by the driver) every pod claims as `imex-channel`.
  The ComputeDomain is created before the Job and owned by it (the gateway adds the ownerReference
  once the Job exists), so it is deleted with the Job;
- on clusters declared `workloadApi` (Kubernetes 1.35's `scheduling.k8s.io/v1alpha1` Workload), a
  gang's Workload with one pod group `gang: {minCount: pods}` and each pod's `workloadRef` to it, in
  place of a coscheduling PodGroup.
Pure: edits and returns plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.core.topology import CLIQUE_LABEL

__all__ = [
    "CHANNEL_CLAIM",
    "COMPUTE_DOMAIN_API",
    "GANG_POD_GROUP",
    "add_channel_claim",
    "channel_template_name",
    "compute_domain",
    "gang_workload",
    "pin_to_clique",
    "wants_compute_domain",
]

COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
WORKLOAD_API = "scheduling.k8s.io/v1alpha1"  # Kubernetes 1.35 (GenericWorkload / GangScheduling gates)
GANG_POD_GROUP = "workers"  # the Workload's one pod group, named in each pod's workloadRef
CHANNEL_CLAIM = "imex-channel"  # the pod's claim on the domain's IMEX channel


def channel_template_name(name: str) -> str:
    """The ResourceClaimTemplate the DRA driver makes for a ComputeDomain's channel."""
    return f"{name}-channel"


def pin_to_clique(pod_spec: dict[str, Any], clique: str) -> None:
    """Require the pod's node to be in `clique`: the expression joins every existing node selector
    term (terms are ORed, expressions inside one ANDed), or makes the only term."""
    expr = {"key": CLIQUE_LABEL, "operator": "In", "values": [clique]}
    node_affinity = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({"matchExpressions": [expr]})
        return
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(expr))


def wants_compute_domain(job: JobRequest, placement: Placement, traits: ClusterTraits) -> bool:
    """A ComputeDomain goes with the job where the cluster runs them and the gang has a clique."""
    return traits.compute_domains and placement.clique is not None and job.gpus_per_pod > 0


def compute_domain(name: str, namespace: str, labels: Mapping[str, str], nodes: int) -> dict[str, Any]:
    """The attempt's ComputeDomain: `numNodes` nodes (the gang's pods, one per node on NVL72 nodes)."""
    return {
        "apiVersion": COMPUTE_DOMAIN_API,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "numNodes": nodes,
            "channel": {"resourceClaimTemplate": {"name": channel_template_name(name)}},
        },
    }


def add_channel_claim(pod_spec: dict[str, Any], name: str) -> None:
    """Every pod claims the domain's channel; the (one) container names the claim."""
    pod_spec.setdefault("resourceClaims", []).append(
        {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template_name(name)}
    )
    for container in pod_spec.get("containers", []):
        container.setdefault("resources", {}).setdefault("claims", []).append({"name": CHANNEL_CLAIM})


def gang_workload(name: str, namespace: str, labels: Mapping[str, str], pods: int) -> dict[str, Any]:
    """The gang hint through the Workload API: one pod group whose `gang.minCount` is the job's pods
    (all or none), tied to the Job by `controllerRef`; the pods join it by `spec.workloadRef`."""
    return {
        "apiVersion": WORKLOAD_API,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
            "podGroups": [{"name": GANG_POD_GROUP, "policy": {"gang": {"minCount": pods}}}],
        },
    }
