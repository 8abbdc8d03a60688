"""The wire format of a job submission: the pydantic model `JobSpec` (and its parts) a submission is read
into, by the API's POST /v1/jobs and by the hub's sync alike (broker.intake.parse).

Owns validation at the edge (every error names the field, camelCase as the user wrote it) and the
mapping from the wire model to broker.core.model's JobRequest.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from broker.core.model import (
    FailoverPolicy,
    ImagePullFailure,
    JobRequest,
    MigNeed,
)
from broker.core.topology import NvlinkClique
from broker.intake.batch_schemas import GROUP_PATTERN, ArraySpec, DependencySpec, NotifySpec, batch_fields
from broker.intake.strict_wire import DNS_LABEL, Wire
from broker.workload import checkpoint
from broker.workload.pod_template import EnvFromSource, EnvVar, Volume, VolumeMount, dump

# Sane bounds: beyond them a request is a mistake (or an attack), never a job that could run.
MAX_DURATION_SECONDS = 366 * 24 * 3600.0
MAX_GPU_MEMORY_GIB = 4096
_ARG_MAX = 32 * 1024

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


class MigSpec(Wire):
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


class TopologySpec(Wire):
    """Placement above the node (docs/topology.md): `nvlinkClique: required | preferred` puts every pod of
    the gang inside one NVLink clique (a GB200/GB300 NVL72 rack)."""

    nvlink_clique: Literal["required", "preferred"] | None = Field(default=None, alias="nvlinkClique")


class CheckpointSpec(Wire):
    """The checkpoint contract (docs/migration.md): on a stop the container gets SIGTERM and this long
    to save, writes where to its termination message, and the next attempt gets GPUFED_RESUME_FROM."""

    grace_period_seconds: int = Field(
        alias="gracePeriodSeconds", ge=1, le=checkpoint.MAX_GRACE_SECONDS, strict=True
    )


class JobSpec(Wire):
    """A job submission. Whole GPUs (`gpus`) or MIG slices (`mig`), per pod; `pods` > 1 is a gang."""

    name: str = Field(pattern=DNS_LABEL, max_length=40)
    tenant: str = Field(default="default", pattern=DNS_LABEL)
    namespace: str = Field(default="default", pattern=DNS_LABEL)
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
    priority_class: str | None = Field(default=None, alias="priorityClass", pattern=DNS_LABEL)
    clusters: list[str] = Field(default_factory=list, max_length=256)
    duration_seconds: float | None = Field(
        default=None, alias="durationSeconds", gt=0, le=MAX_DURATION_SECONDS
    )
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    pod_annotations: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, alias="podAnnotations", max_length=64
    )
    # docs/batch.md: its group, an array of it, what it waits for, whom to tell (broker.intake.batch_schemas)
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
