"""The wire format of the HTTP API: pydantic models for job submissions and the views the API returns.

Owns validation at the edge (every error names the field, camelCase as the user wrote it) and the
mapping between wire models and broker.core.model dataclasses. The API module and the CLI both use it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from broker.api import strict_wire
from broker.api.batch_schemas import GROUP_PATTERN, ArraySpec, DependencySpec, NotifySpec, batch_fields
from broker.api.gpu_health_view import cluster_gpu_health_view, fault_view
from broker.capacity.node_detail import NodeDetail
from broker.core.model import (
    ClusterSummary,
    FailoverPolicy,
    ImagePullFailure,
    JobEvent,
    JobRecord,
    JobRequest,
    MigNeed,
    NoFit,
    Placement,
    ProductCapacity,
)
from broker.core.topology import NvlinkClique
from broker.scheduler.placement import ClusterVerdict
from broker.workload import checkpoint
from broker.workload.pod_template import EnvFromSource, EnvVar, Volume, VolumeMount, dump

# Sane bounds: beyond them a request is a mistake (or an attack), never a job that could run.
MAX_DURATION_SECONDS = 366 * 24 * 3600.0
MAX_GPU_MEMORY_GIB = 4096
_ARG_MAX = 32 * 1024

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# Kubernetes label syntax: key = [DNS-subdomain prefix "/"] name; name and value <= 63 characters.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_problem(key: str, value: str) -> str | None:
    """Why the API server would refuse this label, or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        return f"label key {key!r}: the prefix must be a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return f"label key {key!r}: the name must be 1-63 of [A-Za-z0-9-_.], alphanumeric at both ends"
    if value and not _LABEL_NAME.match(value):
        return f"label {key!r}: the value must be empty or 1-63 of [A-Za-z0-9-_.], alphanumeric at both ends"
    return None


class _Wire(BaseModel):
    # Infinity and NaN are refused by name (JSON parsers accept them; a job waiting forever is no answer).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_guessing(cls, value: Any, info: ValidationInfo) -> Any:
        """A string for a number or a boolean ("10", "true", "yes"): refused naming the field."""
        field = cls.model_fields.get(info.field_name or "")
        problem = strict_wire.guessed(field.annotation, value) if field is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value


class MigSpec(_Wire):
    """MIG by profile name (`profile: 1g.10gb`) or by need (`memoryGB: 10`, `computeSlices: 1`)."""

    profile: str | None = Field(default=None, pattern=r"^[1-7]g\.[0-9]+gb(\+me)?$")
    memory_gb: int | None = Field(default=None, alias="memoryGB", ge=1, le=1024)
    compute_slices: int = Field(default=1, alias="computeSlices", ge=1, le=7)
    slices: int = Field(default=1, ge=1, le=56, description="MIG devices per pod")

    @model_validator(mode="after")
    def _one_way(self) -> MigSpec:
        if (self.profile is None) == (self.memory_gb is None):
            raise ValueError("give either profile or memoryGB")
        return self


class TopologySpec(_Wire):
    """Placement above the node (docs/topology.md): `nvlinkClique: required | preferred` puts every pod of
    the gang inside one NVLink clique (a GB200/GB300 NVL72 rack)."""

    nvlink_clique: Literal["required", "preferred"] | None = Field(default=None, alias="nvlinkClique")


class CheckpointSpec(_Wire):
    """The checkpoint contract (docs/migration.md): on a stop the container gets SIGTERM and this long
    to save, writes where to its termination message, and the next attempt gets GPUFED_RESUME_FROM."""

    grace_period_seconds: int = Field(
        alias="gracePeriodSeconds", ge=1, le=checkpoint.MAX_GRACE_SECONDS, strict=True
    )


class JobSpec(_Wire):
    """A job submission. Whole GPUs (`gpus`) or MIG slices (`mig`), per pod; `pods` > 1 is a gang."""

    name: str = Field(pattern=_DNS_LABEL, max_length=40)
    tenant: str = Field(default="default", pattern=_DNS_LABEL)
    namespace: str = Field(default="default", pattern=_DNS_LABEL)
    image: str = Field(default="busybox:1.36", min_length=1, max_length=512, pattern=r"^\S+$")
    command: list[Annotated[str, Field(max_length=_ARG_MAX)]] = Field(default_factory=list, max_length=256)
    args: list[Annotated[str, Field(max_length=_ARG_MAX)]] = Field(default_factory=list, max_length=1024)
    env: list[EnvVar] = Field(default_factory=list, max_length=256)
    env_from: list[EnvFromSource] = Field(default_factory=list, alias="envFrom", max_length=32)
    volumes: list[Volume] = Field(default_factory=list, max_length=64)
    volume_mounts: list[VolumeMount] = Field(default_factory=list, alias="volumeMounts", max_length=64)
    working_dir: str | None = Field(default=None, alias="workingDir", max_length=4096)
    image_pull_policy: str | None = Field(
        default=None, alias="imagePullPolicy", pattern=r"^(Always|IfNotPresent|Never)$"
    )
    # strict: "2" and true are refused, naming the field (issue 21, case 8)
    gpus: int = Field(default=0, ge=0, le=64, strict=True, description="whole GPUs per pod")
    pods: int = Field(default=1, ge=1, le=1024, strict=True)
    gpu_products: list[str] = Field(default_factory=list, alias="gpuProducts")
    min_gpu_memory_gib: int = Field(default=0, alias="minGpuMemoryGiB", ge=0, le=MAX_GPU_MEMORY_GIB)
    mig: MigSpec | None = None
    numa_aligned: bool = Field(default=False, alias="numaAligned")
    topology: TopologySpec | None = None
    checkpoint: CheckpointSpec | None = None
    cpu: float = Field(default=1.0, gt=0, le=512, description="CPUs per pod")
    memory_gib: float = Field(default=1.0, alias="memoryGiB", gt=0, le=8192)
    allow_burst: bool = Field(default=False, alias="allowBurst")
    max_wait_seconds: float | None = Field(
        default=None,
        alias="maxWaitSeconds",
        ge=0,
        le=30 * 86400,
        description="with allowBurst: go to a cloud cluster once the predicted on-prem wait is over this",
    )
    failover: FailoverPolicy = Field(
        default=FailoverPolicy.REQUEUE,
        description="requeue: placed again elsewhere when its cluster is lost or its pods disrupted; never: FAILED",
    )
    on_image_pull_failure: ImagePullFailure = Field(
        default=ImagePullFailure.FAIL,
        alias="onImagePullFailure",
        description="fail: FAILED with the registry's message once the image cannot be pulled for "
        "imagePullFailSeconds; requeue: withdrawn from that cluster and placed again elsewhere",
    )
    max_price_per_gpu_hour: float | None = Field(default=None, alias="maxPricePerGpuHour", ge=0, le=10_000)
    priority_class: str | None = Field(default=None, alias="priorityClass", pattern=_DNS_LABEL)
    clusters: list[str] = Field(default_factory=list, max_length=256)
    duration_seconds: float | None = Field(
        default=None, alias="durationSeconds", gt=0, le=MAX_DURATION_SECONDS
    )
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    pod_annotations: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, alias="podAnnotations", max_length=64
    )
    # docs/batch.md: its group, an array of it, what it waits for, whom to tell (broker.api.batch_schemas)
    group: str | None = Field(default=None, pattern=GROUP_PATTERN)
    array: ArraySpec | None = None
    depends_on: list[DependencySpec] = Field(default_factory=list, alias="dependsOn", max_length=64)
    notify: NotifySpec | None = None

    @field_validator("pod_annotations")
    @classmethod
    def _valid_annotation_keys(cls, annotations: dict[str, str]) -> dict[str, str]:
        for key in annotations:
            problem = _label_problem(key, "")
            if problem:
                raise ValueError(problem.replace("label", "annotation"))
        return annotations

    @field_validator("labels")
    @classmethod
    def _valid_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        """They go onto the Job and its pods: refuse here what the member cluster would refuse."""
        for key, value in labels.items():
            problem = _label_problem(key, value)
            if problem:
                raise ValueError(problem)
        return labels

    @model_validator(mode="after")
    def _gpus_or_mig(self) -> JobSpec:
        if self.mig is not None and self.gpus:
            raise ValueError("ask for whole GPUs (gpus) or MIG slices (mig), not both")
        if self.mig is None and self.gpus == 0:
            raise ValueError("a GPU job needs gpus >= 1 or a mig request")
        if self.numa_aligned and self.mig is not None:
            raise ValueError("numaAligned applies to whole GPUs only")
        if self.topology is not None and self.topology.nvlink_clique and self.mig is not None:
            raise ValueError("topology.nvlinkClique applies to whole GPUs only")
        volumes = {v.name for v in self.volumes}
        for i, m in enumerate(self.volume_mounts):
            if m.name not in volumes:
                raise ValueError(f"volumeMounts[{i}].name: no volume named {m.name!r}")
        return self

    def to_request(self) -> JobRequest:
        mig = self.mig
        return JobRequest(
            name=self.name,
            tenant=self.tenant,
            namespace=self.namespace,
            image=self.image,
            command=tuple(self.command),
            args=tuple(self.args),
            env=tuple(dump(e) for e in self.env),
            env_from=tuple(dump(e) for e in self.env_from),
            volumes=tuple(dump(v) for v in self.volumes),
            volume_mounts=tuple(dump(m) for m in self.volume_mounts),
            working_dir=self.working_dir,
            image_pull_policy=self.image_pull_policy,
            pod_annotations=dict(self.pod_annotations),
            gpus_per_pod=self.gpus,
            pods=self.pods,
            gpu_products=tuple(self.gpu_products),
            min_gpu_memory_mib=self.min_gpu_memory_gib * 1024,
            mig_profile=mig.profile if mig else None,
            mig_need=MigNeed(mig.memory_gb, mig.compute_slices) if mig and mig.memory_gb else None,
            mig_slices_per_pod=mig.slices if mig else 1,
            numa_aligned=self.numa_aligned,
            cpu_millis_per_pod=int(self.cpu * 1000),
            memory_mib_per_pod=int(self.memory_gib * 1024),
            allow_burst=self.allow_burst,
            max_wait_seconds=self.max_wait_seconds,
            failover=self.failover,
            on_image_pull_failure=self.on_image_pull_failure,
            max_price_per_gpu_hour=self.max_price_per_gpu_hour,
            priority_class=self.priority_class,
            clusters=tuple(self.clusters),
            duration_seconds=self.duration_seconds,
            checkpoint_grace_seconds=self.checkpoint.grace_period_seconds if self.checkpoint else None,
            labels=dict(self.labels),
            nvlink_clique=NvlinkClique(
                self.topology.nvlink_clique if self.topology and self.topology.nvlink_clique else "none"
            ),
            batch=batch_fields(self.group, self.array, self.depends_on, self.notify, self.name),
        )


class PlacementView(_Wire):
    cluster: str
    product: str
    resource_name: str = Field(alias="resourceName")
    units_per_pod: int = Field(alias="unitsPerPod")
    pods: int
    score: int
    scores: dict[str, int]
    mig_profile: str | None = Field(alias="migProfile")
    burst: bool
    clique: str | None = None  # the NVLink clique the gang is pinned to (docs/topology.md)
    dra: bool = False  # the pods ask through a ResourceClaimTemplate (the claim kind chosen for this job)

    @classmethod
    def of(cls, p: Placement) -> PlacementView:
        return cls(
            cluster=p.cluster,
            product=p.product,
            resource_name=p.resource_name,
            units_per_pod=p.units_per_pod,
            pods=p.pods,
            score=p.score,
            scores=dict(p.scores),
            mig_profile=p.mig_profile,
            burst=p.burst,
            clique=p.clique,
            dra=p.dra,
        )


class JobView(_Wire):
    id: str
    name: str
    tenant: str
    state: str
    reason: str
    attempt: int
    cluster: str | None
    workload: str | None
    placement: PlacementView | None
    created_at: float = Field(alias="createdAt")
    updated_at: float = Field(alias="updatedAt")
    request: dict[str, Any]
    trace_id: str | None = Field(default=None, alias="traceId")
    warnings: list[str] = Field(default_factory=list)  # e.g. never fits any declared cluster, even empty
    source: str | None = None  # a hub object's "hub:jobs.batch/<ns>/<name>" (docs/hub.md)
    # the checkpoint the next attempt resumes from (GPUFED_RESUME_FROM, docs/migration.md)
    resume_from: str | None = Field(default=None, alias="resumeFrom")
    group: str | None = None  # docs/batch.md
    depends_on: list[dict[str, str]] = Field(default_factory=list, alias="dependsOn")
    held_by: str | None = Field(default=None, alias="heldBy")

    @classmethod
    def of(cls, r: JobRecord) -> JobView:
        req = r.request
        return cls(
            id=r.id,
            name=req.name,
            tenant=req.tenant,
            group=req.batch.group or None,
            depends_on=[{d.kind: d.ref, "when": str(d.when)} for d in req.batch.depends_on],
            held_by=r.held_by,
            state=str(r.state),
            reason=r.reason,
            warnings=list(r.warnings),
            source=req.source or None,
            resume_from=r.resume_from,
            attempt=r.attempt,
            cluster=r.cluster,
            workload=r.workload_name,
            placement=PlacementView.of(r.placement) if r.placement else None,
            created_at=r.created_at,
            updated_at=r.updated_at,
            trace_id=r.trace_parent.split("-")[1]
            if r.trace_parent and r.trace_parent.count("-") == 3
            else None,
            request={
                "gpus": req.gpus_per_pod,
                "pods": req.pods,
                "gpuProducts": list(req.gpu_products),
                "migProfile": req.mig_profile,
                "migNeedGB": req.mig_need.memory_gb if req.mig_need else None,
                "numaAligned": req.numa_aligned,
                "nvlinkClique": str(req.nvlink_clique),
                "allowBurst": req.allow_burst,
                "maxWaitSeconds": req.max_wait_seconds,
                "failover": str(req.failover),
                "onImagePullFailure": str(req.on_image_pull_failure),
                "image": req.image,
                "command": list(req.command),
                "args": list(req.args),
                "env": [dict(e) for e in req.env],
                "labels": dict(req.labels),
                "priorityClass": req.priority_class,
                "checkpointGraceSeconds": req.checkpoint_grace_seconds,
            },
        )


class EventView(_Wire):
    at: float
    state: str
    attempt: int
    reason: str
    cluster: str | None

    trace_id: str | None = Field(default=None, alias="traceId")

    @classmethod
    def of(cls, e: JobEvent) -> EventView:
        return cls(
            at=e.at,
            state=str(e.state),
            attempt=e.attempt,
            reason=e.reason,
            cluster=e.cluster,
            trace_id=e.trace_id,
        )


def kind_view(k: ProductCapacity) -> dict[str, Any]:
    """One claim kind's capacity of a product (a job fits the cluster when it fits one kind)."""
    return {
        "kind": "dra" if k.dra else "device-plugin",
        "allocatable": k.allocatable,
        "allocated": k.allocated,
        "free": k.free,
        "maxFreeOnOneNode": k.max_free_on_one_node,
        "nodesByFree": list(k.nodes_by_free),
    }


def summary_view(s: ClusterSummary, now: float) -> dict[str, Any]:
    """A cluster's capacity as the fleet view shows it (JSON-ready)."""
    return {
        "cluster": s.cluster,
        "tier": str(s.tier),
        "region": s.region,
        "health": str(s.health),
        "healthReason": s.health_reason,
        "ageSeconds": round(max(0.0, now - s.heartbeat), 1) if s.heartbeat else None,
        "version": s.version,
        "nodes": {"total": s.nodes_total, "ready": s.nodes_ready, "bad": s.bad_nodes},
        "gpuHealth": cluster_gpu_health_view(s.gpu_health),
        "products": [
            {
                "product": p.product,
                "memoryMiB": p.memory_mib,
                "total": p.total,
                "allocatable": p.allocatable,
                "allocated": p.allocated,
                "free": p.free,
                "maxFreeOnOneNode": p.max_free_on_one_node,
                "nodesByFree": list(p.nodes_by_free),
                "numaBlocks": list(p.numa_blocks),
                "singleNumaNodeFree": p.single_numa_node_free,
                "nodesByNodeFree": list(p.whole_nodes_by_free),
                "sharedAllocatable": p.shared_allocatable,
                "sharedFree": p.shared_free,
                "offered": p.offered,  # device-plugin | dra | both
                # the kind jobs ask through: one (free counts it), or per-job when both are counted
                "askedThrough": "per-job" if p.kinds else ("dra" if p.dra else "device-plugin"),
                "kinds": [kind_view(k) for k in (p.kinds or (p,))],  # what each kind offers on its own
                "pricePerGpuHour": s.price_per_gpu_hour.get(p.product),
            }
            for p in s.products
        ],
        "mig": [
            {
                "product": m.product,
                "profile": m.profile,
                "resource": m.resource_name,
                "allocatable": m.allocatable,
                "free": m.free,
                "largestFreeOnNode": m.largest_free_on_node,
                "settled": m.settled,
            }
            for m in s.mig
        ],
        # NVLink cliques (docs/topology.md): one small row per (product, clique)
        "cliques": [
            {
                "clique": c.clique,
                "product": c.product,
                "nodes": c.nodes,
                "freeNodes": c.free_nodes,
                "free": c.free,
                "nodesByFree": list(c.nodes_by_free),
            }
            for c in s.cliques
        ],
        "queues": [
            {
                "clusterQueue": q.cluster_queue,
                "flavor": q.flavor,
                "resource": q.resource,
                "nominal": q.nominal,
                "used": q.used,
                "headroom": q.headroom,
            }
            for q in s.queues
        ],
        # tenant namespaces (docs/tenancy.md): quotas and limits, cpu in millicores, memory in bytes
        "namespaces": [
            {
                "name": n.name,
                "quotas": [{"name": q.name, "hard": dict(q.hard), "used": dict(q.used)} for q in n.quotas],
                "limits": [
                    {
                        "type": i.type,
                        "default": dict(i.default),
                        "defaultRequest": dict(i.default_request),
                        "min": dict(i.min),
                        "max": dict(i.max),
                        "maxLimitRequestRatio": dict(i.max_limit_request_ratio),
                    }
                    for i in n.limits
                ],
            }
            for n in s.namespaces
        ],
    }


def verdict_view(v: ClusterVerdict) -> dict[str, Any]:
    """One cluster's level-1 verdict for explain: why not, or how it scored."""
    rejection = v.rejection
    return {
        "cluster": v.cluster,
        "tier": str(v.tier),
        "feasible": v.feasible,
        "chosen": v.chosen,
        "score": v.score,
        "scores": dict(v.scores),
        "rejection": None
        if rejection is None
        else {
            "plugin": rejection.plugin,
            "reason": rejection.reason,
            "code": rejection.code.name,
            "best": rejection.best,
        },
        "option": None
        if v.option is None
        else {
            "product": v.option.product,
            "resourceName": v.option.resource_name,
            "unitsPerPod": v.option.units_per_pod,
            "migProfile": v.option.mig_profile,
            "clique": v.option.clique,
        },
        "filtersPassed": [st.plugin for st in v.statuses if st.is_success],
        "note": v.note,
    }


def decision_view(decision: Placement | NoFit) -> dict[str, Any]:
    if isinstance(decision, NoFit):
        return {"placed": False, "message": decision.message}
    return {"placed": True, "placement": PlacementView.of(decision).model_dump(by_alias=True)}


def node_view(d: NodeDetail) -> dict[str, Any]:
    """One node of the fleet view's node detail (JSON-ready)."""
    return {
        "name": d.name,
        "product": d.product,
        "ready": d.ready,
        "cordoned": d.cordoned,
        "gpus": d.gpus,
        "wholeAllocatable": d.whole_allocatable,
        "wholeFree": d.whole_free,
        "sharedAllocatable": d.shared_allocatable,
        "sharedFree": d.shared_free,
        "sharedReplicas": d.shared_replicas,
        "migStrategy": d.mig_strategy,
        "mig": [{"profile": m.profile, "allocatable": m.allocatable, "free": m.free} for m in d.mig],
        "numa": [
            {"zone": z.zone, "gpusAllocatable": z.gpus_allocatable, "gpusAvailable": z.gpus_available}
            for z in d.numa
        ],
        "topologyPolicy": d.topology_policy,
        "taints": list(d.taints),
        "offersNothing": d.offers_nothing,
        "gpuFaults": [fault_view(f) for f in d.gpu_faults],  # which GPU is unhealthy, why, since when
        "quarantined": d.quarantined,
    }
