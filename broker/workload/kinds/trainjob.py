"""TrainJob (trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2): a training run on a runtime.

The pod templates live in the runtime (spec.runtimeRef: a ClusterTrainingRuntime or TrainingRuntime in the
member), so the demand comes from spec.trainer: numNodes (default 1) nodes of spec.trainer.resourcesPerNode
each, gang-placed. A member offers the kind only when it serves the API and holds the named
ClusterTrainingRuntime (scheduler/plugins/kinds.py). Level 2 writes its hints through
spec.podSpecOverrides targeting the runtime's trainer Job ("node"): nodeSelector and tolerations. Status:
the Complete and Failed conditions are terminal; running once every Job in status.jobsStatus is ready;
Suspended is Kueue's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.k8s_names import QUEUE_LABEL
from broker.core.workloads import WorkloadStatus
from broker.workload.kinds.base import Kind, Template, condition, status_from
from broker.workload.kinds.demand import (
    Demand,
    PodDemand,
    Role,
    gpu_of,
    managed_by,
    mapping,
    positive_int,
    quantity,
    read_meta,
)

API_VERSION = "trainer.kubeflow.org/v1alpha1"
OWN_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
TRAINER_JOB = "node"  # the runtime's replicated Job that runs the trainer


def runtime_ref(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the runtime a TrainJob names."""
    ref = mapping(mapping(obj.get("spec"), "spec").get("runtimeRef"), "spec.runtimeRef")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("spec.runtimeRef.name", "required: the ClusterTrainingRuntime to run on")
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    if kind not in RUNTIME_KINDS:
        raise InvalidRequest("spec.runtimeRef.kind", f"{kind!r}: one of {', '.join(RUNTIME_KINDS)}")
    group = ref.get("apiGroup")
    if group not in (None, "trainer.kubeflow.org"):
        raise InvalidRequest("spec.runtimeRef.apiGroup", f"{group!r}: trainer.kubeflow.org")
    return str(kind), name


def demand(obj: Mapping[str, Any]) -> Demand:
    name, namespace, labels, annotations = read_meta(obj)
    spec = mapping(obj.get("spec"), "spec")
    managed_by(spec.get("managedBy"), "spec.managedBy", (OWN_CONTROLLER,))
    if spec.get("suspend"):
        raise InvalidRequest("spec.suspend", "a suspended TrainJob cannot be placed")
    runtime_ref(obj)
    trainer = mapping(spec.get("trainer"), "spec.trainer")
    nodes = positive_int(trainer.get("numNodes"), "spec.trainer.numNodes")
    at = "spec.trainer.resourcesPerNode"
    resources = mapping(trainer.get("resourcesPerNode"), at)
    gpus, mig, where = gpu_of(resources, at)
    pod = PodDemand(
        gpus=gpus,
        mig=mig,
        cpu_millis=int(quantity(resources, "cpu", Decimal(1), at) * 1000),
        memory_mib=int(quantity(resources, "memory", Decimal(2**20), at)),
        image=str(trainer.get("image") or ""),
        gpu_field=where,
    )
    return Demand(
        api_version=API_VERSION,
        kind="TrainJob",
        name=name,
        namespace=namespace,
        roles=(Role(TRAINER_JOB, nodes, pod, "spec.trainer", f"{at}.limits"),),
        gang=(TRAINER_JOB,),
        queue=labels.get(QUEUE_LABEL),
        labels=labels,
        annotations=annotations,
    )


def templates(obj: dict[str, Any]) -> list[Template]:
    return []  # the pod templates are the runtime's: hints go through podSpecOverrides


def overrides(obj: dict[str, Any], template: dict[str, Any]) -> None:
    """Level 2's node selection for the trainer nodes, as a podSpecOverride of the runtime's trainer Job;
    the pod annotations (kubesim's run time) go to spec.annotations, which the Trainer puts on the JobSet
    and its Jobs."""
    pod_spec = template.get("spec") or {}
    override: dict[str, Any] = {"targetJobs": [{"name": TRAINER_JOB}]}
    if pod_spec.get("nodeSelector"):
        override["nodeSelector"] = dict(pod_spec["nodeSelector"])
    if pod_spec.get("tolerations"):
        override["tolerations"] = list(pod_spec["tolerations"])
    obj["spec"]["podSpecOverrides"] = [*(obj["spec"].get("podSpecOverrides") or []), override]
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if annotations:
        obj["spec"]["annotations"] = {**(obj["spec"].get("annotations") or {}), **annotations}


def status(obj: Mapping[str, Any], name: str, namespace: str, pods: int) -> WorkloadStatus:
    failed = condition(obj, "Failed")
    if failed is not None:
        return status_from(name, namespace, pods=pods, failed=failed)
    if condition(obj, "Complete") is not None:
        return status_from(name, namespace, pods=pods, complete=True)
    jobs = [j for j in (obj.get("status") or {}).get("jobsStatus") or () if isinstance(j, Mapping)]
    running = any(
        j.get("name") == TRAINER_JOB and int(j.get("ready") or 0) + int(j.get("succeeded") or 0) >= 1
        for j in jobs
    )
    return status_from(
        name,
        namespace,
        pods=pods,
        running=running,
        suspended=condition(obj, "Suspended") is not None,
        active=sum(int(j.get("active") or 0) for j in jobs),
    )


KIND = Kind(
    api_version=API_VERSION,
    kind="TrainJob",
    plural="trainjobs",
    demand=demand,
    templates=templates,
    status=status,
    overrides=overrides,
)
