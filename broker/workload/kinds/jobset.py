"""JobSet (jobset.x-k8s.io/v1alpha2): replicated Jobs placed together.

Demand: each spec.replicatedJobs[i] is a role of replicas x parallelism pods (its Job template's pod
template); every role is gang-placed. Status: the Completed / Failed conditions are terminal; the job is
running once every replicated Job reports all its Jobs ready (status.replicatedJobsStatus[].ready +
succeeded = replicas). Pure.
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

API_VERSION = "jobset.x-k8s.io/v1alpha2"
OWN_CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"


def _replicated(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = mapping(obj.get("spec"), "spec")
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise InvalidRequest("spec.replicatedJobs", "at least one replicated Job is required")
    return [mapping(r, f"spec.replicatedJobs[{i}]") for i, r in enumerate(rjobs)]


def demand(obj: Mapping[str, Any]) -> Demand:
    name, namespace, labels, annotations = read_meta(obj)
    spec = mapping(obj.get("spec"), "spec")
    managed_by(spec.get("managedBy"), "spec.managedBy", (OWN_CONTROLLER,))
    if spec.get("suspend"):
        raise InvalidRequest("spec.suspend", "a suspended JobSet cannot be placed")
    roles: list[Role] = []
    templates: list[tuple[str, Mapping[str, Any]]] = []
    seen: set[str] = set()
    for i, rjob in enumerate(_replicated(obj)):
        at = f"spec.replicatedJobs[{i}]"
        role = rjob.get("name")
        if not isinstance(role, str) or not role:
            raise InvalidRequest(f"{at}.name", "required")
        if role in seen:
            raise InvalidRequest(f"{at}.name", f"{role!r} is used twice")
        seen.add(role)
        replicas = positive_int(rjob.get("replicas"), f"{at}.replicas")
        job_spec = mapping(mapping(rjob.get("template"), f"{at}.template").get("spec"), f"{at}.template.spec")
        parallelism = positive_int(job_spec.get("parallelism"), f"{at}.template.spec.parallelism")
        completions = job_spec.get("completions")
        if completions is not None and completions != parallelism:
            raise InvalidRequest(
                f"{at}.template.spec.completions",
                "must equal parallelism: the broker places every pod at once",
            )
        path = f"{at}.template.spec.template"
        pod = read_pod(job_spec.get("template"), path)
        roles.append(Role(name=role, pods=replicas * parallelism, pod=pod, path=path))
        templates.append((path, mapping(job_spec.get("template"), path)))
    return Demand(
        api_version=API_VERSION,
        kind="JobSet",
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
    out: list[Template] = []
    for rjob in obj["spec"]["replicatedJobs"]:
        tmpl = rjob["template"]["spec"].setdefault("template", {})
        path = "t"
        out.append((str(rjob["name"]), tmpl, read_pod(tmpl, path).wants_gpu))
    return out


def status(obj: Mapping[str, Any], name: str, namespace: str, pods: int) -> WorkloadStatus:
    failed = condition(obj, "Failed")
    if failed is not None:
        return status_from(name, namespace, pods=pods, failed=failed)
    if condition(obj, "Completed") is not None:
        return status_from(name, namespace, pods=pods, complete=True)
    st = obj.get("status") or {}
    by_name = {str(r.get("name")): r for r in st.get("replicatedJobsStatus") or () if isinstance(r, Mapping)}
    wanted = {
        str(r.get("name")): int(r.get("replicas") or 1)
        for r in (obj.get("spec") or {}).get("replicatedJobs") or ()
    }
    running = bool(wanted) and all(
        int(by_name.get(n, {}).get("ready") or 0) + int(by_name.get(n, {}).get("succeeded") or 0) >= want
        for n, want in wanted.items()
    )
    active = sum(int(r.get("active") or 0) for r in by_name.values())
    suspended = condition(obj, "Suspended") is not None
    return status_from(name, namespace, pods=pods, running=running, suspended=suspended, active=active)


KIND = Kind(
    api_version=API_VERSION,
    kind="JobSet",
    plural="jobsets",
    demand=demand,
    templates=templates,
    status=status,
    kueue_suspend_path=("spec", "suspend"),
)
