"""PyTorchJob (kubeflow.org/v1, the Training Operator): a Master and Workers, placed together.

Demand: spec.pytorchReplicaSpecs.<Master|Worker> is a role of `replicas` pods (Master at most 1); each
template needs a container named "pytorch" (as the operator does); every role is gang-placed; priority and
queue from spec.runPolicy.schedulingPolicy (else the templates / the queue label). Status: the Succeeded
and Failed conditions are terminal, Running means every replica runs, Suspended is Kueue's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.k8s_names import QUEUE_LABEL
from broker.core.workloads import WorkloadStatus
from broker.workload.kinds.base import Kind, Template, condition, status_from
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

API_VERSION = "kubeflow.org/v1"
OWN_CONTROLLER = "kubeflow.org/training-operator"
REPLICA_TYPES = ("Master", "Worker")
CONTAINER = "pytorch"


def demand(obj: Mapping[str, Any]) -> Demand:
    name, namespace, labels, annotations = read_meta(obj)
    spec = mapping(obj.get("spec"), "spec")
    run = mapping(spec.get("runPolicy"), "spec.runPolicy")
    managed_by(run.get("managedBy"), "spec.runPolicy.managedBy", (OWN_CONTROLLER,))
    if run.get("suspend"):
        raise InvalidRequest("spec.runPolicy.suspend", "a suspended PyTorchJob cannot be placed")
    specs = mapping(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    if not specs:
        raise InvalidRequest("spec.pytorchReplicaSpecs", "a Master or a Worker is required")
    roles: list[Role] = []
    templates: list[tuple[str, Mapping[str, Any]]] = []
    for rtype, raw in specs.items():
        at = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            raise InvalidRequest(at, f"unknown replica type; known: {', '.join(REPLICA_TYPES)}")
        rspec = mapping(raw, at)
        replicas = positive_int(rspec.get("replicas"), f"{at}.replicas")
        if rtype == "Master" and replicas != 1:
            raise InvalidRequest(f"{at}.replicas", "a PyTorchJob has one Master")
        path = f"{at}.template"
        template = mapping(rspec.get("template"), path)
        containers = mapping(template.get("spec"), f"{path}.spec").get("containers") or []
        if not any(isinstance(c, Mapping) and c.get("name") == CONTAINER for c in containers):
            raise InvalidRequest(f"{path}.spec.containers", f"a container named {CONTAINER!r} is required")
        roles.append(Role(name=rtype, pods=replicas, pod=read_pod(template, path), path=path))
        templates.append((path, template))
    scheduling = mapping(run.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy")
    priority = scheduling.get("priorityClass") or one_priority(templates)
    return Demand(
        api_version=API_VERSION,
        kind="PyTorchJob",
        name=name,
        namespace=namespace,
        roles=tuple(roles),
        gang=tuple(r.name for r in roles),
        priority_class=str(priority) if priority else None,
        queue=str(scheduling.get("queue") or labels.get(QUEUE_LABEL) or "") or None,
        labels=labels,
        annotations=annotations,
    )


def templates(obj: dict[str, Any]) -> list[Template]:
    out: list[Template] = []
    for rtype, rspec in obj["spec"]["pytorchReplicaSpecs"].items():
        tmpl = rspec.setdefault("template", {})
        out.append((str(rtype), tmpl, read_pod(tmpl, "t").wants_gpu))
    return out


def status(obj: Mapping[str, Any], name: str, namespace: str, pods: int) -> WorkloadStatus:
    failed = condition(obj, "Failed")
    if failed is not None:
        return status_from(name, namespace, pods=pods, failed=failed)
    if condition(obj, "Succeeded") is not None:
        return status_from(name, namespace, pods=pods, complete=True)
    replicas = (obj.get("status") or {}).get("replicaStatuses") or {}
    active = sum(int((r or {}).get("active") or 0) for r in replicas.values() if isinstance(r, Mapping))
    return status_from(
        name,
        namespace,
        pods=pods,
        running=condition(obj, "Running") is not None,
        suspended=condition(obj, "Suspended") is not None,
        active=active,
    )


KIND = Kind(
    api_version=API_VERSION,
    kind="PyTorchJob",
    plural="pytorchjobs",
    demand=demand,
    templates=templates,
    status=status,
    managed_by_path=("spec", "runPolicy", "managedBy"),
)
