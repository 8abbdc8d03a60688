"""A workload kind's demand as the placer sees it, and the reading of one role's pod template.

Owns Role and Demand (what a kind asks for: pods per role, whole GPUs or MIG slices per pod, which roles are
gang-placed together, priority class and Kueue queue) and `read_pod(template, path)`: the GPU, cpu and memory
requests of one pod template, every refusal naming the field under `path` (for example
"spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]").
`native(...)` turns a Demand into the native submission JobSpec validates, so every kind is queued, placed,
budgeted and preempted as one gang of `pods` x `gpus` like any job. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.k8s_names import GPU, MIG_PREFIX, QUEUE_LABEL
from broker.core.quantity import QuantityError, parse_quantity
from broker.workload import k8s_job

__all__ = [
    "CLAIM_GPUS",
    "Demand",
    "PodDemand",
    "Role",
    "claim_of",
    "managed_by",
    "mapping",
    "native",
    "one_priority",
    "positive_int",
    "read_meta",
    "read_pod",
]

MAX_PODS = 1024


@dataclass(frozen=True)
class PodDemand:
    """What one pod of a role asks for."""

    gpus: int = 0  # whole GPUs (nvidia.com/gpu)
    mig: tuple[str, int] | None = None  # (profile, slices) for nvidia.com/mig-<profile>
    cpu_millis: int = 0
    memory_mib: int = 0
    image: str = ""
    gpu_field: str = ""  # where the GPU limit was read (for refusals naming it)
    claim: str | None = None  # the pod's own DRA claim its GPUs come through (its name in resourceClaims)

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.mig is not None


@dataclass(frozen=True)
class Role:
    """One role of a workload (a replicated Job, a replica type, a Ray group): `pods` pods alike."""

    name: str
    pods: int
    pod: PodDemand
    path: str  # the field of the role's pod template ("spec.replicatedJobs[0].template.spec.template")
    limits_field: str = ""  # where its GPU limit would go, when not in a pod template's first container

    @property
    def gpu_limits(self) -> str:
        return self.limits_field or f"{self.path}.spec.containers[0].resources.limits"


@dataclass(frozen=True)
class Demand:
    api_version: str
    kind: str
    name: str
    namespace: str | None
    roles: tuple[Role, ...]
    gang: tuple[str, ...]  # the roles placed together, all or none
    priority_class: str | None = None
    queue: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpu_roles(self) -> tuple[Role, ...]:
        return tuple(r for r in self.roles if r.pod.wants_gpu)

    @property
    def gpu_pods(self) -> int:
        return sum(r.pods for r in self.gpu_roles)

    @property
    def total_pods(self) -> int:
        return sum(r.pods for r in self.roles)


def mapping(value: object, field_name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest(field_name, "must be an object")
    return value


def positive_int(value: object, field_name: str, default: int = 1, minimum: int = 1) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or value > MAX_PODS:
        raise InvalidRequest(field_name, f"an integer from {minimum} to {MAX_PODS}")
    return value


def gpu_of(resources: Mapping[str, Any], path: str) -> tuple[int, tuple[str, int] | None, str]:
    requests = mapping(resources.get("requests"), f"{path}.requests")
    limits = mapping(resources.get("limits"), f"{path}.limits")
    names = sorted({k for k in (*requests, *limits) if k == GPU or str(k).startswith(MIG_PREFIX)})
    if len(names) > 1:
        raise InvalidRequest(f"{path}.limits", f"ask for one GPU resource per container, not {names}")
    if not names:
        return 0, None, ""
    name = names[0]
    if name in requests and name in limits and str(requests[name]) != str(limits[name]):
        raise InvalidRequest(f"{path}.requests[{name}]", "must equal the limit (an extended resource)")
    where = f"{path}.{'limits' if name in limits else 'requests'}[{name}]"
    raw = limits.get(name, requests.get(name))
    try:
        count = parse_quantity(raw)
    except QuantityError as e:
        raise InvalidRequest(where, str(e)) from None
    if count != count.to_integral_value() or count < 0 or count > 64:
        raise InvalidRequest(where, f"{raw!r}: a whole number of devices from 0 to 64")
    if name == GPU:
        return int(count), None, where
    if count == 0:
        return 0, None, ""
    profile = name.removeprefix(MIG_PREFIX).replace(".me", "+me")
    return 0, (profile, int(count)), where


def quantity(resources: Mapping[str, Any], name: str, unit: Decimal, path: str) -> Decimal:
    requests = mapping(resources.get("requests"), f"{path}.requests")
    limits = mapping(resources.get("limits"), f"{path}.limits")
    raw = requests.get(name, limits.get(name))
    if raw is None:
        return Decimal(0)
    try:
        return parse_quantity(raw) / unit
    except (QuantityError, ArithmeticError) as e:
        where = f"{path}.{'requests' if name in requests else 'limits'}.{name}"
        raise InvalidRequest(where, str(e)) from None


def read_pod(template: object, path: str) -> PodDemand:
    """The demand of one pod template (a PodTemplateSpec at `path`): GPUs summed over its containers (one
    kind of GPU resource per pod), cpu and memory summed from requests (else limits)."""
    tmpl = mapping(template, path)
    pod = mapping(tmpl.get("spec"), f"{path}.spec")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InvalidRequest(f"{path}.spec.containers", "at least one container is required")
    claim = claim_of(tmpl, path)
    gpus, mig, gpu_field, image = 0, None, "", ""
    cpu, memory = Decimal(0), Decimal(0)
    for i, raw in enumerate(containers):
        cpath = f"{path}.spec.containers[{i}]"
        container = mapping(raw, cpath)
        if not image and isinstance(container.get("image"), str):
            image = container["image"]
        resources = mapping(container.get("resources"), f"{cpath}.resources")
        g, m, where = gpu_of(resources, f"{cpath}.resources")
        if (g or m) and (gpus or mig):
            if m is not None and mig is not None and m[0] == mig[0]:
                mig = (mig[0], mig[1] + m[1])
                continue
            if g and gpus:
                gpus += g
                continue
            raise InvalidRequest(f"{cpath}.resources.limits", "one kind of GPU resource per pod")
        if g or m:
            gpus, mig, gpu_field = g, m, where
        cpu += quantity(resources, "cpu", Decimal(1), f"{cpath}.resources")
        memory += quantity(resources, "memory", Decimal(2**20), f"{cpath}.resources")
    if claim is not None:
        if gpus or mig:
            raise InvalidRequest(gpu_field, "the GPUs come through the pod's claim: ask one way, not both")
        gpus, gpu_field = claim
    if gpus > 64:
        raise InvalidRequest(gpu_field, f"{gpus} GPUs in one pod: at most 64")
    return PodDemand(
        gpus=gpus,
        mig=mig,
        cpu_millis=int(cpu * 1000),
        memory_mib=int(memory),
        image=image,
        gpu_field=gpu_field,
        claim=claim_name(tmpl) if claim is not None else None,
    )


CLAIM_GPUS = "gpufed.io/claim-gpus"  # on a pod template: whole GPUs each pod gets through its claim


def claim_name(template: Mapping[str, Any]) -> str:
    return str(template["spec"]["resourceClaims"][0]["name"])


def claim_of(template: Mapping[str, Any], path: str) -> tuple[int, str] | None:
    """A pod template's own DRA claim: (GPUs per pod, the field they were read from), None without one.

    One entry in spec.resourceClaims, by resourceClaimTemplateName (a template makes a claim per pod; a
    shared resourceClaimName can't follow the job to another cluster), used by a container's
    resources.claims; how many whole GPUs it asks for is the pod template's annotation
    gpufed.io/claim-gpus (the broker writes the ResourceClaimTemplate itself in the member, with the
    product selector of the placement, or nvidia.com/gpu where the job is placed on the device plugin)."""
    pod = mapping(template.get("spec"), f"{path}.spec")
    claims = pod.get("resourceClaims")
    if not claims:
        return None
    at = f"{path}.spec.resourceClaims"
    if not isinstance(claims, list):
        raise InvalidRequest(at, "must be a list")
    if len(claims) > 1:
        raise InvalidRequest(f"{at}[1]", "one claim per pod: the GPUs' (other devices are not placed)")
    entry = mapping(claims[0], f"{at}[0]")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{at}[0].name", "required")
    if entry.get("resourceClaimName"):
        raise InvalidRequest(
            f"{at}[0].resourceClaimName",
            "a shared ResourceClaim can't follow the job to a member cluster: use resourceClaimTemplateName",
        )
    if not entry.get("resourceClaimTemplateName"):
        raise InvalidRequest(f"{at}[0].resourceClaimTemplateName", "required")
    used = False
    for i, raw in enumerate(pod.get("containers") or ()):
        resources = mapping(mapping(raw, f"{path}.spec.containers[{i}]").get("resources"), "resources")
        for j, ref in enumerate(resources.get("claims") or ()):
            ref_name = mapping(ref, "claim").get("name")
            if ref_name != name:
                raise InvalidRequest(
                    f"{path}.spec.containers[{i}].resources.claims[{j}].name",
                    f"{ref_name!r} is not a claim of the pod (spec.resourceClaims names {name!r})",
                )
            used = True
    if not used:
        raise InvalidRequest(f"{at}[0]", f"no container uses claim {name!r} (resources.claims)")
    annotations = mapping(mapping(template.get("metadata"), f"{path}.metadata").get("annotations"), "a")
    where = f"{path}.metadata.annotations[{CLAIM_GPUS}]"
    raw_count = annotations.get(CLAIM_GPUS)
    if raw_count is None:
        raise InvalidRequest(where, "required with a claim: the whole GPUs each pod's claim asks for")
    try:
        count = int(str(raw_count))
    except ValueError:
        raise InvalidRequest(where, f"{raw_count!r}: a whole number of GPUs from 1 to 64") from None
    if not 1 <= count <= 64:
        raise InvalidRequest(where, f"{raw_count!r}: a whole number of GPUs from 1 to 64")
    return count, where


def _uniform(roles: Sequence[Role]) -> Role:
    """The one GPU size every GPU role asks for (the placer places one size per workload)."""
    first = roles[0]
    for role in roles[1:]:
        if (role.pod.gpus, role.pod.mig) != (first.pod.gpus, first.pod.mig):
            have = f"{role.pod.mig[1]} x mig-{role.pod.mig[0]}" if role.pod.mig else f"{role.pod.gpus} GPU(s)"
            want = (
                f"{first.pod.mig[1]} x mig-{first.pod.mig[0]}"
                if first.pod.mig
                else f"{first.pod.gpus} GPU(s)"
            )
            raise InvalidRequest(
                role.pod.gpu_field,
                f"{have} per pod here, {want} in role {first.name}: every GPU role of a workload asks for "
                "the same GPUs per pod",
            )
    return first


def native(demand: Demand) -> tuple[dict[str, Any], dict[str, str]]:
    """The native submission for a demand (JobSpec validates it), and where each native field came from
    (native name -> the kind's field) for refusals. A workload without a GPU role is refused."""
    gpu_roles = demand.gpu_roles
    if not gpu_roles:
        where = demand.roles[0].gpu_limits if demand.roles else "spec"
        raise InvalidRequest(where, "no role asks for nvidia.com/gpu or nvidia.com/mig-*: nothing to place")
    first = _uniform(gpu_roles)
    pods = demand.gpu_pods
    if pods > MAX_PODS:
        raise InvalidRequest(first.path, f"{pods} GPU pods: at most {MAX_PODS}")
    out: dict[str, Any] = {"name": demand.name, "pods": pods}
    origin = {"name": "metadata.name", "namespace": "metadata.namespace", "labels": "metadata.labels"}
    if demand.namespace:
        out["namespace"] = demand.namespace
    if first.pod.mig is not None:
        out["mig"] = {"profile": first.pod.mig[0], "slices": first.pod.mig[1]}
        origin["mig"] = first.pod.gpu_field
    else:
        out["gpus"] = first.pod.gpus
        origin["gpus"] = first.pod.gpu_field
    if first.pod.image:
        out["image"] = first.pod.image
        origin["image"] = f"{first.path}.spec.containers[0].image"
    cpu = max((r.pod.cpu_millis for r in gpu_roles), default=0)
    memory = max((r.pod.memory_mib for r in gpu_roles), default=0)
    if cpu:
        out["cpu"] = cpu / 1000
        origin["cpu"] = f"{first.path}.spec.containers[*].resources.requests.cpu"
    if memory:
        out["memoryGiB"] = memory / 1024
        origin["memoryGiB"] = f"{first.path}.spec.containers[*].resources.requests.memory"
    if demand.priority_class:
        out["priorityClass"] = demand.priority_class
        origin["priorityClass"] = f"{first.path}.spec.priorityClassName"
    labels = {k: v for k, v in demand.labels.items() if k != QUEUE_LABEL}
    if labels:
        out["labels"] = labels
    for key, value in demand.annotations.items():
        if key in k8s_job.ANNOTATIONS:
            k8s_job.annotation_into(key, value, out)
            origin[k8s_job.ANNOTATIONS[key][0]] = f"metadata.annotations[{key}]"
        elif key.startswith("gpufed.io/"):
            known = ", ".join(sorted(k8s_job.ANNOTATIONS))
            raise InvalidRequest(f"metadata.annotations[{key}]", f"unknown gpufed annotation; known: {known}")
    return out, origin


def read_meta(obj: Mapping[str, Any]) -> tuple[str, str | None, dict[str, str], dict[str, str]]:
    """metadata.name (required), namespace, labels and annotations of a submitted object."""
    meta = mapping(obj.get("metadata"), "metadata")
    if meta.get("generateName") and not meta.get("name"):
        raise InvalidRequest("metadata.generateName", "not supported: give a name")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("metadata.name", "required")
    namespace = meta.get("namespace")
    labels = dict(mapping(meta.get("labels"), "metadata.labels"))
    annotations = dict(mapping(meta.get("annotations"), "metadata.annotations"))
    return name, str(namespace) if namespace else None, labels, annotations


def managed_by(value: object, field_name: str, own: Sequence[str]) -> None:
    """spec.managedBy: absent, gpufed's, or the kind's own controller (the member copy carries none)."""
    if value in (None, "", "gpufed.io/broker", *own):
        return
    raise InvalidRequest(field_name, f"{value!r}: another controller manages this object; leave it unset")


def one_priority(roles: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
    """The priorityClassName the roles' pod templates agree on (None when none sets one)."""
    found: tuple[str, str] | None = None
    for path, template in roles:
        pod = mapping(mapping(template, path).get("spec"), f"{path}.spec")
        value = pod.get("priorityClassName")
        if value is None:
            continue
        if found is not None and value != found[1]:
            raise InvalidRequest(
                f"{path}.spec.priorityClassName",
                f"{value!r} here, {found[1]!r} at {found[0]}: one per workload",
            )
        found = (path, str(value))
    return found[1] if found else None
