"""RayJob (ray.io/v1, KubeRay): a RayCluster (a head and worker groups) and the job submitted to it.

Demand: the head (1 pod) and each spec.rayClusterSpec.workerGroupSpecs[i] (replicas, else minReplicas, else
1, times numOfHosts) are roles, gang-placed together; the submitter pod asks for no GPU and is not placed.
The broker creates the cluster with the job, so spec.clusterSelector (an existing cluster) and the
interactive mode are refused. Status: jobDeploymentStatus Complete with jobStatus SUCCEEDED succeeds, with
any other jobStatus (FAILED, STOPPED) fails; Failed fails; Running means the cluster is up and the job
runs; Suspended is Kueue's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.k8s_names import QUEUE_LABEL
from broker.core.workloads import WorkloadStatus
from broker.workload.kinds.base import Kind, Template, status_from
from broker.workload.kinds.demand import (
    Demand,
    Role,
    managed_by,
    mapping,
    one_priority,
    positive_int,
    read_meta,
    read_pod,
)

API_VERSION = "ray.io/v1"
OWN_CONTROLLER = "ray.io/kuberay-operator"
MODES = ("K8sJobMode", "HTTPMode", "SidecarMode")


def _replicas(group: Mapping[str, Any], at: str) -> int:
    for key in ("replicas", "minReplicas"):
        if group.get(key) is not None:
            return positive_int(group.get(key), f"{at}.{key}", minimum=0)
    return 1


def demand(obj: Mapping[str, Any]) -> Demand:
    name, namespace, labels, annotations = read_meta(obj)
    spec = mapping(obj.get("spec"), "spec")
    managed_by(spec.get("managedBy"), "spec.managedBy", (OWN_CONTROLLER,))
    if spec.get("suspend"):
        raise InvalidRequest("spec.suspend", "a suspended RayJob cannot be placed")
    if spec.get("clusterSelector"):
        raise InvalidRequest(
            "spec.clusterSelector", "the broker creates the RayCluster with the job: give spec.rayClusterSpec"
        )
    mode = spec.get("submissionMode")
    if mode not in (None, *MODES):
        raise InvalidRequest("spec.submissionMode", f"{mode!r}: one of {', '.join(MODES)}")
    if not spec.get("entrypoint"):
        raise InvalidRequest("spec.entrypoint", "required: the command the job runs")
    cluster = mapping(spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    if not cluster:
        raise InvalidRequest("spec.rayClusterSpec", "required")
    head_at = "spec.rayClusterSpec.headGroupSpec.template"
    head = mapping(
        mapping(cluster.get("headGroupSpec"), "spec.rayClusterSpec.headGroupSpec").get("template"), head_at
    )
    roles = [Role(name="head", pods=1, pod=read_pod(head, head_at), path=head_at)]
    templates: list[tuple[str, Mapping[str, Any]]] = [(head_at, head)]
    groups = cluster.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise InvalidRequest("spec.rayClusterSpec.workerGroupSpecs", "must be a list")
    seen: set[str] = set()
    for i, raw in enumerate(groups):
        at = f"spec.rayClusterSpec.workerGroupSpecs[{i}]"
        group = mapping(raw, at)
        gname = group.get("groupName")
        if not isinstance(gname, str) or not gname:
            raise InvalidRequest(f"{at}.groupName", "required")
        if gname in seen or gname == "head":
            raise InvalidRequest(f"{at}.groupName", f"{gname!r} is used twice")
        seen.add(gname)
        hosts = positive_int(group.get("numOfHosts"), f"{at}.numOfHosts")
        pods = _replicas(group, at) * hosts
        path = f"{at}.template"
        template = mapping(group.get("template"), path)
        if pods:
            roles.append(Role(name=gname, pods=pods, pod=read_pod(template, path), path=path))
            templates.append((path, template))
    return Demand(
        api_version=API_VERSION,
        kind="RayJob",
        name=name,
        namespace=namespace,
        roles=tuple(roles),
        gang=tuple(r.name for r in roles),
        priority_class=one_priority(templates),
        queue=labels.get(QUEUE_LABEL),
        labels=labels,
        annotations=annotations,
    )


def templates(obj: dict[str, Any]) -> list[Template]:
    cluster = obj["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"].setdefault("template", {})
    out: list[Template] = [("head", head, read_pod(head, "t").wants_gpu)]
    for group in cluster.get("workerGroupSpecs") or ():
        tmpl = group.setdefault("template", {})
        out.append((str(group.get("groupName")), tmpl, read_pod(tmpl, "t").wants_gpu))
    submitter = obj["spec"].get("submitterPodTemplate")
    if isinstance(submitter, dict) and submitter.get("spec"):  # no GPU: labels, tolerations, priority
        out.append(("submitter", submitter, False))
    return out


def status(obj: Mapping[str, Any], name: str, namespace: str, pods: int) -> WorkloadStatus:
    st = obj.get("status") or {}
    deployment, job = st.get("jobDeploymentStatus"), st.get("jobStatus")
    why = str(st.get("message") or st.get("reason") or "")
    if deployment == "Complete":
        if job == "SUCCEEDED":
            return status_from(name, namespace, pods=pods, complete=True)
        return status_from(
            name, namespace, pods=pods, failed=f"Ray job {job or 'ended'}" + (f": {why}" if why else "")
        )
    if deployment == "Failed":
        return status_from(name, namespace, pods=pods, failed=why or f"Ray job {job or 'failed'}")
    return status_from(
        name,
        namespace,
        pods=pods,
        running=deployment == "Running",
        suspended=deployment in ("Suspended", "Suspending"),
    )


KIND = Kind(
    api_version=API_VERSION,
    kind="RayJob",
    plural="rayjobs",
    demand=demand,
    templates=templates,
    status=status,
    kueue_suspend_path=("spec", "suspend"),
)
