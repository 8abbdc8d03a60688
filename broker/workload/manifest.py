"""Level 2: the batch/v1 Job (and companions) the broker creates in the chosen cluster.

Owns the workload's name (derived only from job id and attempt, so a retried create is harmless) and the
in-cluster scheduler hints: resource names for the cluster's MIG strategy, the GPU product selector,
preferred node affinity, GPU/spot tolerations, schedulerName for NUMA-aware or gang scheduling,
Guaranteed QoS for NUMA-aligned jobs, Kueue queue label + suspend, priority, a coscheduling PodGroup,
and the labels that tie every object to the broker's job; on DRA clusters a ResourceClaimTemplate
instead of GPU resources (dra_claims.py); for a placement in an NVLink clique, the pin to it and a
ComputeDomain (topology.py). The user's kept pod-template fields (image, command, args,
env, envFrom, volumes from ConfigMaps/Secrets, volumeMounts) go into the one container. Pure: returns
plain dicts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from broker.core import catalog
from broker.core.k8s_names import (
    ATTEMPT_LABEL,
    CLUSTER_ANNOTATION,
    DURATION_ANNOTATION,
    FEDERATION_ANNOTATION,
    GPU,
    GPU_TAINT_KEY,
    HOSTNAME_LABEL,
    IDEMPOTENCY_ANNOTATION,
    JOB_ID_LABEL,
    L_PRODUCT,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    REQUEST_ANNOTATION,
    SPOT_TAINT_KEYS,
    SUBMITTED_AT_ANNOTATION,
)
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.tenancy import member_namespace
from broker.workload import checkpoint, dra_claims, topology

__all__ = [
    "ATTEMPT_LABEL",
    "DURATION_ANNOTATION",
    "JOB_ID_LABEL",
    "POD_GROUP_LABEL",
    "QUEUE_LABEL",
    "WorkloadManifests",
    "build_workload",
    "decode_request",
    "job_id_label_value",
    "product_selector_values",
    "recovery_annotations",
    "workload_name",
]

PRODUCT_LABEL = L_PRODUCT
CONTAINER_NAME = "main"
# Indexed pods get the hostname "<job>-<index>", which must stay a DNS label (<= 63): keep room for it.
MAX_NAME = 52
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]")
_REQUEST = TypeAdapter(JobRequest)


def recovery_annotations(
    request: JobRequest, submitted_at: float, idempotency_key: str | None, federation: str | None
) -> dict[str, str]:
    """The annotations that let a broker rebuild the job's record from its Job alone (after a Redis
    loss): the submitted request as JSON, when it was accepted, its idempotency key, and which broker
    (store prefix) owns it, so a broker never adopts another federation's Jobs."""
    out = {
        REQUEST_ANNOTATION: _REQUEST.dump_json(request, exclude_defaults=True).decode(),
        SUBMITTED_AT_ANNOTATION: repr(float(submitted_at)),
    }
    if idempotency_key:
        out[IDEMPOTENCY_ANNOTATION] = idempotency_key
    if federation:
        out[FEDERATION_ANNOTATION] = federation
    return out


def decode_request(text: str) -> JobRequest:
    """The JobRequest of a REQUEST_ANNOTATION (ValueError naming the annotation when it is not one)."""
    try:
        return _REQUEST.validate_json(text)
    except ValueError as exc:
        raise ValueError(f"annotation {REQUEST_ANNOTATION}: not a job request: {exc}") from exc


@dataclass(frozen=True)
class WorkloadManifests:
    """The batch/v1 Job, and the objects that must exist with it (a PodGroup for gangs)."""

    job: dict[str, Any]
    companions: tuple[dict[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.job["metadata"]["namespace"])


def workload_name(job_id: str, attempt: int) -> str:
    """The member-cluster name of a job's attempt: a DNS-1123 label of at most 52 characters.

    "gf-<job id>-<attempt>", lower-cased; when the id needs changing beyond case (odd characters) or
    shortening, a hash of the id keeps different ids apart.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    lowered = job_id.lower()
    clean = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", lowered)).strip("-")
    suffix = f"-{attempt}"
    name = f"gf-{clean}{suffix}"
    if clean == lowered and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:10]
    room = MAX_NAME - len("gf-") - len(suffix) - len(digest) - 1
    head = clean[:room].strip("-")
    return f"gf-{head}-{digest}{suffix}" if head else f"gf-{digest}{suffix}"


def job_id_label_value(job_id: str) -> str:
    """The gpufed.io/job-id label value the broker writes for a job id."""
    return _label_value(job_id)


def _label_value(value: str) -> str:
    """A string made safe as a label value (<= 63, alphanumerics at both ends)."""
    return _LABEL_VALUE.sub("-", value)[:63].strip("-._")


def product_selector_values(placement: Placement) -> tuple[str, ...]:
    """The gpu.product label values that select the placement's nodes.

    The parent GFD strings the cluster reported (else the catalog's), with `-MIG-<profile>` appended
    under the MIG single strategy (nvidia.com/gpu with a MIG profile).
    """
    parents = placement.gfd_products or catalog.gfd_products(placement.product)
    if placement.mig_profile is not None and placement.resource_name == GPU:
        return tuple(f"{p}-MIG-{placement.mig_profile}" for p in parents)
    return tuple(parents)


def _resources(job: JobRequest, placement: Placement, dra: bool = False) -> dict[str, dict[str, str]]:
    cpu = job.cpu_millis_per_pod
    requests: dict[str, str] = {"memory": f"{job.memory_mib_per_pod}Mi"}
    if job.numa_aligned:
        requests["cpu"] = str(max(1, -(-cpu // 1000)))  # whole CPUs, so the CPU manager pins them
    else:
        requests["cpu"] = f"{cpu}m"
    if placement.resource_name and placement.units_per_pod > 0 and not dra:
        requests[placement.resource_name] = str(placement.units_per_pod)
    # NUMA-aligned: Guaranteed QoS (requests = limits for everything); else GPUs and memory capped.
    limits = dict(requests) if job.numa_aligned else {k: v for k, v in requests.items() if k != "cpu"}
    return {"requests": requests, "limits": limits}


def _tolerations(traits: ClusterTraits) -> list[dict[str, str]]:
    out = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    if traits.spot:
        out += [{"key": key, "operator": "Exists"} for key in SPOT_TAINT_KEYS]
    return out


def _affinity(placement: Placement, products: tuple[str, ...]) -> dict[str, Any]:
    node_affinity: dict[str, Any] = {}
    required = (
        [{"key": PRODUCT_LABEL, "operator": "In", "values": list(products)}] if len(products) > 1 else []
    )
    if placement.avoid_nodes:  # nodes whose GPUs failed this job or are quarantined (docs/health.md)
        required.append({"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(placement.avoid_nodes)})
    if required:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": required}]
        }
    if placement.preferred_nodes:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": max(1, 100 - 10 * i),
                "preference": {
                    "matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [n]}]
                },
            }
            for i, n in enumerate(placement.preferred_nodes[:10])
        ]
    return {"nodeAffinity": node_affinity} if node_affinity else {}


def _scheduler_name(job: JobRequest, traits: ClusterTraits) -> str | None:
    """Gangs go to the coscheduling profile; every other whole-GPU pod to the topology-aware profile
    where the cluster runs one. The default scheduler does not read NodeResourceTopology, so it may bind
    a pod to a single-numa-node node whose zones can't hold the pod's GPUs, and the kubelet then refuses
    it (TopologyAffinityError); the topology-aware filter keeps such nodes out."""
    if job.pods > 1 and traits.gang_scheduler:
        return traits.gang_scheduler
    if traits.topology_scheduler and (job.numa_aligned or job.gpus_per_pod > 0):
        return traits.topology_scheduler
    return None


def build_workload(
    job_id: str,
    attempt: int,
    job: JobRequest,
    placement: Placement,
    traits: ClusterTraits,
    annotations: Mapping[str, str] | None = None,
    resume_from: str | None = None,
) -> WorkloadManifests:
    """The Job for one attempt of a job in the placement's cluster, with its level-2 hints; `annotations`
    (recovery_annotations) are added to the Job's metadata. A job that checkpoints (docs/migration.md)
    gets its grace period on the pods and GPUFED_ATTEMPT / GPUFED_RESUME_FROM (`resume_from`)."""
    name = workload_name(job_id, attempt)
    namespace = traits.namespace_for(job.tenant)  # the tenant's namespace there (where its LocalQueue lives)
    ids = {JOB_ID_LABEL: _label_value(job_id), ATTEMPT_LABEL: str(attempt)}
    job_labels = {**{k: v for k, v in job.labels.items()}, **ids}
    pod_labels = dict(job_labels)
    workload_gang = job.pods > 1 and traits.workload_api  # Kubernetes' own gang API (topology.py)
    gang = job.pods > 1 and traits.gang_scheduler is not None and not workload_gang
    if gang:
        pod_labels[POD_GROUP_LABEL] = name
    if traits.kueue_local_queue:
        job_labels[QUEUE_LABEL] = traits.kueue_local_queue
    pod_annotations: dict[str, str] = dict(job.pod_annotations)
    if job.duration_seconds is not None:
        pod_annotations[DURATION_ANNOTATION] = f"{job.duration_seconds:g}"

    dra = dra_claims.dra_request(job, placement, traits)  # DRA cluster: GPUs through a claim
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": job.image,
        "resources": _resources(job, placement, dra is not None),
    }
    if dra is not None:
        container["resources"]["claims"] = [{"name": dra_claims.CLAIM_NAME}]
    if job.command:
        container["command"] = list(job.command)
    if job.args:
        container["args"] = list(job.args)
    if job.env or job.checkpoint_grace_seconds is not None:
        env = [dict(e) for e in job.env]
        if job.checkpoint_grace_seconds is not None:
            env = checkpoint.with_resume_env(env, attempt, resume_from)
        container["env"] = env
    if job.env_from:
        container["envFrom"] = [dict(e) for e in job.env_from]
    if job.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in job.volume_mounts]
    if job.working_dir:
        container["workingDir"] = job.working_dir
    if job.image_pull_policy:
        container["imagePullPolicy"] = job.image_pull_policy
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "tolerations": _tolerations(traits),
        **checkpoint.pod_spec_fields(job),
    }
    if job.volumes:
        pod_spec["volumes"] = [dict(v) for v in job.volumes]
    if dra is not None:
        pod_spec["resourceClaims"] = [{"name": dra_claims.CLAIM_NAME, "resourceClaimTemplateName": name}]
    # DRA nodes carry no GPU product labels: the claim's selectors pick the product instead
    products = product_selector_values(placement) if placement.resource_name and dra is None else ()
    if len(products) == 1:
        pod_spec["nodeSelector"] = {PRODUCT_LABEL: products[0]}
    affinity = _affinity(placement, products)
    if affinity:
        pod_spec["affinity"] = affinity
    if placement.clique is not None:
        topology.pin_to_clique(pod_spec, placement.clique)
    domain = topology.wants_compute_domain(job, placement, traits)
    if domain:
        topology.add_channel_claim(pod_spec, name)
    if workload_gang:
        pod_spec["workloadRef"] = {"name": name, "podGroup": topology.GANG_POD_GROUP}
    scheduler = _scheduler_name(job, traits)
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    if job.priority_class:
        pod_spec["priorityClassName"] = job.priority_class

    template_meta: dict[str, Any] = {"labels": pod_labels}
    if pod_annotations:
        template_meta["annotations"] = pod_annotations
    spec: dict[str, Any] = {
        "parallelism": job.pods,
        "completions": job.pods,
        "backoffLimit": 0,
        # A pod disrupted under the job (node lost, spot reclaimed, preempted) fails the Job with reason
        # PodFailurePolicy, so the broker tells it from a failure of the work and applies the job's
        # failover policy (requeue elsewhere) instead of reporting FAILED.
        "podFailurePolicy": {
            "rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
            ]
        },
        "template": {"metadata": template_meta, "spec": pod_spec},
    }
    if job.pods > 1:
        spec["completionMode"] = "Indexed"
    if traits.kueue_local_queue:
        spec["suspend"] = True
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": job_labels,
            "annotations": {**(annotations or {}), CLUSTER_ANNOTATION: placement.cluster},
        },
        "spec": spec,
    }
    companions: tuple[dict[str, Any], ...] = ()
    if gang:
        min_resources = {}
        if placement.resource_name and placement.units_per_pod > 0 and dra is None:
            min_resources[placement.resource_name] = str(placement.units_per_pod * job.pods)
        group_spec: dict[str, Any] = {"minMember": job.pods}
        if min_resources:
            group_spec["minResources"] = min_resources
        companions = (
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(ids)},
                "spec": group_spec,
            },
        )
    if dra is not None:
        companions = (dra_claims.claim_template(name, namespace, ids, dra), *companions)
    if domain:
        companions = (topology.compute_domain(name, namespace, ids, job.pods), *companions)
    if workload_gang:
        companions = (topology.gang_workload(name, namespace, ids, job.pods), *companions)
    # first: the tenant's namespace (and LocalQueue), when the broker may create them
    companions = (*member_namespace.namespace_objects(traits, job.tenant), *companions)
    return WorkloadManifests(job=manifest, companions=companions)
