"""Level 2 for a workload kind: the object itself, created in the member with hints in each role's pod
template (not a translation into Jobs).

`build_member(job_id, attempt, request, placement, traits, annotations)` builds the batch/v1 Job that
manifest.build_workload would write for the same request and placement, and carries its hints over:
- the object: the name and namespace of the attempt (manifest.workload_name), the Job's labels (job id,
  attempt, the Kueue queue label) and annotations (recovery, cluster), no spec.managedBy; on a Kueue
  member a kind Kueue admits (JobSet, RayJob: Kind.kueue_suspend_path) is created suspended, like the Job;
- every role's pod template: the broker's pod labels (job id, attempt, coscheduling pod group) and
  annotations, tolerations added, the scheduler name and priority class; GPU roles also get the node
  selection (GPU product selector, preferred nodes, NVLink clique pin) and their GPU resource re-named to
  the placement's (nvidia.com/gpu or nvidia.com/mig-<profile>, as many as the placement gives per pod), or,
  on a DRA placement, the claim instead of the resource;
- the companions: the tenant's namespace and LocalQueue, the PodGroup, DRA claim template, ComputeDomain
  (not Kubernetes' Workload gang object: its pod templates carry no workloadRef here).
Child Jobs of the kind carry no broker labels of their own (the member's controller makes them), so the
sweep never mistakes them for attempts. Pure: plain dicts.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from broker.core.k8s_names import GPU, MIG_PREFIX
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.workload import dra_claims, manifest
from broker.workload.kinds.base import Kind
from broker.workload.kinds.registry import by_api
from broker.workload.manifest import WorkloadManifests

__all__ = ["build_member", "build_workload_any"]

_GPU_ONLY = ("nodeSelector", "affinity")


def _merge_tolerations(pod: dict[str, Any], extra: list[dict[str, Any]]) -> None:
    have = list(pod.get("tolerations") or [])
    for t in extra:
        if t not in have:
            have.append(t)
    if have:
        pod["tolerations"] = have


def _gpu_resources(
    container: dict[str, Any], placement: Placement, dra_claim: list[Any] | None, own_claim: str | None
) -> bool:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return False
    found = False
    if own_claim is not None:  # the user's claim: replaced by the kind the placement chose
        mine = [c for c in resources.get("claims") or () if c.get("name") == own_claim]
        if mine:
            found = True
            resources["claims"] = [c for c in resources.get("claims") or () if c.get("name") != own_claim]
            if not resources["claims"]:
                del resources["claims"]
            if dra_claim is None and placement.resource_name:
                limits = resources.setdefault("limits", {})
                limits[placement.resource_name] = str(placement.units_per_pod)
    for part in ("limits", "requests"):
        values = resources.get(part)
        if not isinstance(values, dict):
            continue
        for key in [k for k in values if k == GPU or str(k).startswith(MIG_PREFIX)]:
            count = str(values.pop(key))
            if count in ("0", ""):
                continue
            found = True
            if dra_claim is None and placement.resource_name:
                values[placement.resource_name] = str(placement.units_per_pod)
    if found and dra_claim is not None:
        resources["claims"] = copy.deepcopy(dra_claim)
    return found


def _set_path(obj: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    holder = obj
    for key in path[:-1]:
        holder = holder.setdefault(key, {})
    holder[path[-1]] = value


def _checkpoint(pod: dict[str, Any], base_pod: Mapping[str, Any]) -> None:
    """A checkpointing job's contract in every role (docs/migration.md): its grace period, and the
    GPUFED_ATTEMPT / GPUFED_RESUME_FROM the broker gave the base pod, in each container."""
    if base_pod.get("terminationGracePeriodSeconds") is not None:
        pod["terminationGracePeriodSeconds"] = base_pod["terminationGracePeriodSeconds"]
    containers = base_pod.get("containers") or [{}]
    ours = [e for e in containers[0].get("env") or () if str(e.get("name", "")).startswith("GPUFED_")]
    if not ours:
        return
    names = {e["name"] for e in ours}
    for container in pod.get("containers") or ():
        if isinstance(container, dict):
            kept = [e for e in container.get("env") or () if e.get("name") not in names]
            container["env"] = [*kept, *copy.deepcopy(ours)]


def _hint(
    template: dict[str, Any],
    base_pod: Mapping[str, Any],
    base_meta: Mapping[str, Any],
    gpu: bool,
    placement: Placement,
    role_template: str | None = None,
) -> None:
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **dict(base_meta.get("labels") or {})}
    if base_meta.get("annotations"):
        meta["annotations"] = {**(meta.get("annotations") or {}), **dict(base_meta["annotations"])}
    pod = template.setdefault("spec", {})
    _merge_tolerations(pod, list(base_pod.get("tolerations") or []))
    for key in ("schedulerName", "priorityClassName"):
        if base_pod.get(key):
            pod[key] = base_pod[key]
    _checkpoint(pod, base_pod)
    if not gpu:
        return
    if base_pod.get("nodeSelector"):
        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **dict(base_pod["nodeSelector"])}
    if base_pod.get("affinity"):
        pod["affinity"] = copy.deepcopy(dict(base_pod["affinity"]))
    own_claim = None
    if pod.get("resourceClaims"):  # the user's own GPU claim (demand.claim_of read it): not copied over
        own_claim = str(pod["resourceClaims"][0].get("name"))
        pod["resourceClaims"] = [c for c in pod["resourceClaims"] if c.get("name") != own_claim]
        if not pod["resourceClaims"]:
            del pod["resourceClaims"]
    claims = None
    if base_pod.get("resourceClaims"):
        main = base_pod["containers"][0].get("resources", {})
        claims = list(main.get("claims") or [])
        mine = copy.deepcopy(base_pod["resourceClaims"])
        if role_template is not None:  # this role's own ResourceClaimTemplate
            for c in mine:
                if c.get("name") == dra_claims.CLAIM_NAME:
                    c["resourceClaimTemplateName"] = role_template
        pod["resourceClaims"] = [*(pod.get("resourceClaims") or []), *mine]
    for container in pod.get("containers") or ():
        if isinstance(container, dict):
            _gpu_resources(container, placement, claims, own_claim)


def build_member(
    adapter: Kind,
    job_id: str,
    attempt: int,
    request: JobRequest,
    placement: Placement,
    traits: ClusterTraits,
    annotations: Mapping[str, str] | None = None,
    resume_from: str | None = None,
) -> WorkloadManifests:
    base = manifest.build_workload(job_id, attempt, request, placement, traits, annotations, resume_from)
    assert request.workload is not None
    job = base.job
    obj: dict[str, Any] = copy.deepcopy(dict(request.workload))
    obj["metadata"] = {
        "name": job["metadata"]["name"],
        "namespace": job["metadata"]["namespace"],
        "labels": dict(job["metadata"]["labels"]),
        "annotations": dict(job["metadata"]["annotations"]),
    }
    spec = obj.setdefault("spec", {})
    path = adapter.managed_by_path
    holder: dict[str, Any] = obj
    for key in path[:-1]:
        nxt = holder.get(key)
        holder = nxt if isinstance(nxt, dict) else {}
    holder.pop(path[-1], None)
    spec.pop("suspend", None)
    if traits.kueue_local_queue and adapter.kueue_suspend_path is not None:
        # a Kueue member admits it (MultiKueue's workers too): created suspended with the queue label the
        # Job's labels carry, started by Kueue's admission (lifecycle reads the suspension as PLACED)
        _set_path(obj, adapter.kueue_suspend_path, True)
    base_template = job["spec"]["template"]
    base_pod = base_template["spec"]
    claim_template = _claim_template(base.companions, job["metadata"]["name"])
    per_role: list[dict[str, Any]] = []
    for role, template, gpu in adapter.templates(obj):
        role_template = None
        if gpu and claim_template is not None:  # one ResourceClaimTemplate per GPU role, owned by the object
            role_template = _role_name(job["metadata"]["name"], role)
            copied = copy.deepcopy(claim_template)
            copied["metadata"]["name"] = role_template
            copied["metadata"]["labels"] = {**copied["metadata"].get("labels", {}), ROLE_LABEL: role}
            per_role.append(copied)
        _hint(template, base_pod, base_template.get("metadata") or {}, gpu, placement, role_template)
    if adapter.overrides is not None:
        adapter.overrides(obj, base_template)
    companions = tuple(
        c
        for c in base.companions
        if not (c.get("kind") == "Workload" and str(c.get("apiVersion", "")).startswith("scheduling.k8s.io"))
        and not (per_role and c is claim_template)
    )
    return WorkloadManifests(job=obj, companions=(*companions, *per_role))


ROLE_LABEL = "gpufed.io/role"


def _claim_template(companions: tuple[dict[str, Any], ...], name: str) -> dict[str, Any] | None:
    """The attempt's GPU ResourceClaimTemplate (a DRA placement), named like the Job."""
    for c in companions:
        if c.get("kind") == "ResourceClaimTemplate" and c["metadata"].get("name") == name:
            return c
    return None


def _role_name(name: str, role: str) -> str:
    """<attempt>-<role> as a DNS subdomain (lower case, [a-z0-9-.], at most 253 characters)."""
    clean = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in role.lower()).strip("-.")
    return f"{name}-{clean or 'role'}"[:253].rstrip("-.")


def build_workload_any(
    job_id: str,
    attempt: int,
    request: JobRequest,
    placement: Placement,
    traits: ClusterTraits,
    annotations: Mapping[str, str] | None = None,
    resume_from: str | None = None,
) -> WorkloadManifests:
    """What dispatching creates for one attempt: a workload kind's object, else the batch/v1 Job
    (`resume_from`: the checkpoint the attempt resumes from, docs/migration.md)."""
    wl = request.workload
    adapter = by_api(wl.get("apiVersion"), wl.get("kind")) if wl is not None else None
    if adapter is None:
        return manifest.build_workload(job_id, attempt, request, placement, traits, annotations, resume_from)
    return build_member(adapter, job_id, attempt, request, placement, traits, annotations, resume_from)
