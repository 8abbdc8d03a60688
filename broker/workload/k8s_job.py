"""Plain Kubernetes input: a batch/v1 Job (also an Indexed, PyTorch-style one) read as a gpufed job.

Owns the translation of a Job manifest into the native submission (a dict JobSpec validates) and the
way back for error paths: a field refused after translation is named as the Job's field
(spec.template.spec.containers[0].env[1].name), not the native one.

What is kept: metadata.name/namespace/labels; parallelism (= completions) as the gang size; the one
container's image, command, args, env, envFrom, volumeMounts, workingDir, imagePullPolicy and resources
(cpu, memory, nvidia.com/gpu, nvidia.com/mig-<profile>); the pod's volumes (configMap, secret,
emptyDir) and priorityClassName; template labels and annotations. Placement preferences come from `gpufed.io/*`
annotations on the Job (ANNOTATIONS below). Anything the broker cannot honour (a second container,
nodeSelector, tolerations, restartPolicy OnFailure, backoffLimit > 0, ...) is refused with the field
named: the broker writes those itself, or they would silently change what runs. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.k8s_names import DURATION_ANNOTATION, GPU, MIG_PREFIX
from broker.core.quantity import QuantityError, parse_quantity
from broker.workload import checkpoint

__all__ = [
    "ANNOTATIONS",
    "annotation_into",
    "as_job_error",
    "is_k8s_job",
    "job_field",
    "to_native",
    "to_native_all",
]

POD = "spec.template.spec"
CONTAINER = f"{POD}.containers[0]"

# gpufed.io/* annotations on the Job -> native field, and how the string value is read.
ANNOTATIONS: dict[str, tuple[str, str]] = {
    "gpufed.io/gpu-products": ("gpuProducts", "list"),
    "gpufed.io/clusters": ("clusters", "list"),
    "gpufed.io/allow-burst": ("allowBurst", "bool"),
    "gpufed.io/max-wait-seconds": ("maxWaitSeconds", "float"),
    "gpufed.io/numa-aligned": ("numaAligned", "bool"),
    "gpufed.io/min-gpu-memory-gib": ("minGpuMemoryGiB", "int"),
    "gpufed.io/max-price-per-gpu-hour": ("maxPricePerGpuHour", "float"),
    "gpufed.io/failover": ("failover", "str"),
    "gpufed.io/on-image-pull-failure": ("onImagePullFailure", "str"),  # fail | requeue (docs/health.md)
    "gpufed.io/tenant": ("tenant", "str"),
    "gpufed.io/duration-seconds": ("durationSeconds", "float"),
    "gpufed.io/nvlink-clique": ("topology", "nvlinkClique"),  # required | preferred (docs/topology.md)
    checkpoint.GRACE_ANNOTATION: ("checkpoint", "checkpointGrace"),  # seconds (docs/migration.md)
}

_JOB_SPEC_KEYS = {"parallelism", "completions", "completionMode", "backoffLimit", "template", "suspend"}
_POD_KEYS = {"containers", "restartPolicy", "volumes", "priorityClassName"}
_CONTAINER_KEYS = {
    "name",
    "image",
    "command",
    "args",
    "env",
    "envFrom",
    "volumeMounts",
    "workingDir",
    "imagePullPolicy",
    "resources",
}
_META_KEYS = {"name", "namespace", "labels", "annotations", "creationTimestamp"}
# native field -> where it came from in the Job (for error paths)
_ORIGIN = {
    "name": "metadata.name",
    "namespace": "metadata.namespace",
    "labels": "metadata.labels",
    "pods": "spec.parallelism",
    "gpus": f"{CONTAINER}.resources.limits[nvidia.com/gpu]",
    "mig": f"{CONTAINER}.resources.limits[nvidia.com/mig-*]",
    "cpu": f"{CONTAINER}.resources.requests.cpu",
    "memoryGiB": f"{CONTAINER}.resources.requests.memory",
    "image": f"{CONTAINER}.image",
    "command": f"{CONTAINER}.command",
    "args": f"{CONTAINER}.args",
    "env": f"{CONTAINER}.env",
    "envFrom": f"{CONTAINER}.envFrom",
    "volumeMounts": f"{CONTAINER}.volumeMounts",
    "workingDir": f"{CONTAINER}.workingDir",
    "imagePullPolicy": f"{CONTAINER}.imagePullPolicy",
    "volumes": f"{POD}.volumes",
    "priorityClass": f"{POD}.priorityClassName",
    "podAnnotations": "spec.template.metadata.annotations",
    **{native: f"metadata.annotations[{key}]" for key, (native, _) in ANNOTATIONS.items()},
}


def is_k8s_job(body: object) -> bool:
    """Whether a submitted body is a Kubernetes object (it has kind/apiVersion) rather than native."""
    return isinstance(body, Mapping) and ("kind" in body or "apiVersion" in body)


def job_field(loc: Sequence[str | int]) -> str:
    """The Job's field path for an error location in the native spec: ("env", 1, "name") ->
    spec.template.spec.containers[0].env[1].name."""
    if not loc:
        return "(body)"
    head, rest = str(loc[0]), loc[1:]
    out = _ORIGIN.get(head, head)
    for part in rest:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def as_job_error(e: InvalidRequest) -> InvalidRequest:
    """A refusal of the native spec made from a Job, re-said with the Job's field: gpuProducts[0] ->
    metadata.annotations[gpufed.io/gpu-products]."""
    head = e.field.split("[", 1)[0].split(".", 1)[0]
    return InvalidRequest(job_field([head]) if head in _ORIGIN else e.field, e.detail)


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest(field, "must be an object")
    return value


def _refuse_unknown(obj: Mapping[str, Any], allowed: set[str], prefix: str, why: str) -> None:
    for key in obj:
        if key not in allowed:
            raise InvalidRequest(f"{prefix}.{key}" if prefix else str(key), why)


def _annotation(key: str, value: object, native: dict[str, Any]) -> None:
    field = f"metadata.annotations[{key}]"
    if not isinstance(value, str):
        raise InvalidRequest(field, "annotation values are strings")
    target, kind = ANNOTATIONS[key]
    text = value.strip()
    try:
        if kind == "list":
            native[target] = [p.strip() for p in text.split(",") if p.strip()]
        elif kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError("must be true or false")
            native[target] = text.lower() == "true"
        elif kind == "int":
            native[target] = int(text)
        elif kind == "float":
            native[target] = float(text)
        elif kind == "nvlinkClique":
            native[target] = {"nvlinkClique": text}
        elif kind == "checkpointGrace":
            native[target] = {"gracePeriodSeconds": checkpoint.parse_grace(text, field)}
        else:
            native[target] = text
    except ValueError as e:
        raise InvalidRequest(field, f"{value!r}: {e}") from None


def annotation_into(key: str, value: object, native: dict[str, Any]) -> None:
    """A gpufed.io/* annotation (one of ANNOTATIONS) read into the native submission (the workload kinds
    take the same annotations)."""
    _annotation(key, value, native)


def _gpu_resources(resources: Mapping[str, Any], native: dict[str, Any]) -> None:
    """nvidia.com/gpu or nvidia.com/mig-<profile> from limits (extended resources: requests, if given,
    must equal limits); cpu and memory from requests (else limits)."""
    prefix = f"{CONTAINER}.resources"
    _refuse_unknown(resources, {"requests", "limits"}, prefix, "only requests and limits are kept")
    requests = _mapping(resources.get("requests"), f"{prefix}.requests")
    limits = _mapping(resources.get("limits"), f"{prefix}.limits")
    gpu_names = sorted({k for k in (*requests, *limits) if k == GPU or k.startswith(MIG_PREFIX)})
    for name in gpu_names:
        if name in requests and name in limits and str(requests[name]) != str(limits[name]):
            raise InvalidRequest(f"{prefix}.requests[{name}]", "must equal the limit (an extended resource)")
    if len(gpu_names) > 1:
        raise InvalidRequest(f"{prefix}.limits", f"ask for one GPU resource per pod, not {gpu_names}")
    for name in gpu_names:
        raw = limits.get(name, requests.get(name))
        field = f"{prefix}.limits[{name}]"
        try:
            count = parse_quantity(raw)
        except QuantityError as e:
            raise InvalidRequest(field, str(e)) from None
        if count != count.to_integral_value() or count < 1 or count > 64:
            raise InvalidRequest(field, f"{raw!r}: a whole number of devices from 1 to 64")
        if name == GPU:
            native["gpus"] = int(count)
        else:
            native["mig"] = {
                "profile": name.removeprefix(MIG_PREFIX).replace(".me", "+me"),
                "slices": int(count),
            }
    for name, target, unit in (("cpu", "cpu", Decimal(1)), ("memory", "memoryGiB", Decimal(2**30))):
        raw = requests.get(name, limits.get(name))
        if raw is None:
            continue
        field = f"{prefix}.{'requests' if name in requests else 'limits'}.{name}"
        try:
            native[target] = float(parse_quantity(raw) / unit)
        except (QuantityError, ArithmeticError) as e:
            raise InvalidRequest(field, str(e)) from None
    for name in (*requests, *limits):
        if name not in ("cpu", "memory") and name not in gpu_names:
            raise InvalidRequest(
                f"{prefix}.limits[{name}]", "the broker places cpu, memory and NVIDIA GPUs only"
            )


def _container(container: Mapping[str, Any], native: dict[str, Any]) -> None:
    _refuse_unknown(
        container,
        _CONTAINER_KEYS,
        CONTAINER,
        "not kept by the broker (it writes probes, ports and security itself)",
    )
    for key in (
        "image",
        "command",
        "args",
        "env",
        "envFrom",
        "volumeMounts",
        "workingDir",
        "imagePullPolicy",
    ):
        if key in container and container[key] is not None:
            native[key] = container[key]
    if "image" not in native:
        raise InvalidRequest(f"{CONTAINER}.image", "required")
    _gpu_resources(_mapping(container.get("resources"), f"{CONTAINER}.resources"), native)


def to_native(job: Mapping[str, Any]) -> dict[str, Any]:
    """The native submission for a batch/v1 Job manifest. InvalidRequest names the Job's field (the
    first problem; to_native_all reports one per part of the Job)."""
    native, problems = to_native_all(job)
    if problems:
        raise problems[0]
    return native


def to_native_all(job: Mapping[str, Any]) -> tuple[dict[str, Any], list[InvalidRequest]]:
    """The native submission so far and every problem found: the Job's metadata, its spec and its pod
    template are read independently, so a Job with a bad name and a bad GPU limit hears of both."""
    if job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
        raise InvalidRequest(
            "kind", f"expected apiVersion batch/v1 kind Job, got {job.get('apiVersion')} {job.get('kind')}"
        )
    native: dict[str, Any] = {}
    labels: dict[str, Any] = {}
    problems: list[InvalidRequest] = []
    for part in (_top, _metadata, _job_spec, _template):
        try:
            part(job, native, labels)
        except InvalidRequest as e:
            problems.append(e)
    if labels:
        native["labels"] = labels
    return native, problems


def _top(job: Mapping[str, Any], native: dict[str, Any], labels: dict[str, Any]) -> None:
    _refuse_unknown(job, {"apiVersion", "kind", "metadata", "spec", "status"}, "", "unknown top-level field")


def _metadata(job: Mapping[str, Any], native: dict[str, Any], labels: dict[str, Any]) -> None:
    meta = _mapping(job.get("metadata"), "metadata")
    if "name" in meta:
        native["name"] = meta["name"]
    _refuse_unknown(meta, _META_KEYS, "metadata", "not kept (generateName is not supported: give a name)")
    if "name" not in meta:
        raise InvalidRequest("metadata.name", "required")
    if meta.get("namespace"):
        native["namespace"] = meta["namespace"]
    labels.update(_mapping(meta.get("labels"), "metadata.labels"))
    for key, value in _mapping(meta.get("annotations"), "metadata.annotations").items():
        if key in ANNOTATIONS:
            _annotation(key, value, native)
        elif key.startswith("gpufed.io/"):
            known = ", ".join(sorted(ANNOTATIONS))
            raise InvalidRequest(f"metadata.annotations[{key}]", f"unknown gpufed annotation; known: {known}")


def _job_spec(job: Mapping[str, Any], native: dict[str, Any], labels: dict[str, Any]) -> None:
    spec = _mapping(job.get("spec"), "spec")
    _refuse_unknown(spec, _JOB_SPEC_KEYS, "spec", "the broker sets it (or cannot honour it across clusters)")
    parallelism, completions = spec.get("parallelism"), spec.get("completions")
    for name, value in (("parallelism", parallelism), ("completions", completions)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidRequest(f"spec.{name}", "a positive integer")
    if parallelism is not None and completions is not None and parallelism != completions:
        raise InvalidRequest(
            "spec.completions", "must equal spec.parallelism: the broker runs all pods as one gang"
        )
    native["pods"] = parallelism or completions or 1
    if spec.get("completionMode") not in (None, "Indexed", "NonIndexed"):
        raise InvalidRequest("spec.completionMode", "Indexed or NonIndexed")
    if spec.get("backoffLimit") not in (None, 0):
        raise InvalidRequest(
            "spec.backoffLimit",
            "must be 0: each attempt runs once; the broker retries by its failover policy",
        )
    if spec.get("suspend"):
        raise InvalidRequest(
            "spec.suspend", "a suspended Job cannot be placed; the broker suspends for Kueue itself"
        )


def _template(job: Mapping[str, Any], native: dict[str, Any], labels: dict[str, Any]) -> None:
    template = _mapping(_mapping(job.get("spec"), "spec").get("template"), "spec.template")
    _refuse_unknown(template, {"metadata", "spec"}, "spec.template", "unknown field")
    tmeta = _mapping(template.get("metadata"), "spec.template.metadata")
    _refuse_unknown(
        tmeta, {"labels", "annotations", "creationTimestamp"}, "spec.template.metadata", "not kept"
    )
    labels.update(_mapping(tmeta.get("labels"), "spec.template.metadata.labels"))
    tann = dict(_mapping(tmeta.get("annotations"), "spec.template.metadata.annotations"))
    if tann:
        native["podAnnotations"] = {k: v for k, v in tann.items() if k != DURATION_ANNOTATION}
    if DURATION_ANNOTATION in tann and "durationSeconds" not in native:
        try:
            native["durationSeconds"] = float(tann[DURATION_ANNOTATION])
        except (TypeError, ValueError):
            raise InvalidRequest(
                f"spec.template.metadata.annotations[{DURATION_ANNOTATION}]", "a number of seconds"
            ) from None
    pod = _mapping(template.get("spec"), POD)
    _refuse_unknown(
        pod, _POD_KEYS, POD, "the broker writes scheduling fields itself; use gpufed.io/* annotations"
    )
    if pod.get("restartPolicy") not in (None, "Never"):
        raise InvalidRequest(f"{POD}.restartPolicy", "must be Never: the broker retries by failover policy")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InvalidRequest(f"{POD}.containers", "one container is required")
    if len(containers) > 1:
        raise InvalidRequest(f"{POD}.containers[1]", "one container per pod is supported")
    _container(_mapping(containers[0], CONTAINER), native)
    if pod.get("volumes") is not None:
        native["volumes"] = pod["volumes"]
    if pod.get("priorityClassName") is not None:
        native["priorityClass"] = pod["priorityClassName"]
