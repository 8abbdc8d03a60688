"""Fleet files: which simulated clusters exist, what their nodes look like, and how a cluster is populated.

Owns
- the fleet-file schema as pydantic models (`FleetSpec`, `ClusterSpec`, `NodePoolSpec`, `CloudPoolSpec`,
  `KueueSpec`, ...). YAML keys are camelCase like Kubernetes; every validation error names the file, the
  cluster and the field (`FleetError`).
- `load_fleet(path)`, `synthetic_fleet(clusters, nodes_per_cluster, gpus_per_node)` for scale tests.
- `render_node(...)`: a Node (GFD labels, GPU/MIG resources, conditions, nodeInfo, taints) and its
  NodeResourceTopology, as the real objects look (reference sections 1, 2). The autoscaler uses it too.
- `populate(store, cluster, clock)`: namespaces, nodes, NRTs, priority classes and Kueue objects.

The document format is described with an example in docs/kubesim.md ("Fleet files").
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from kubesim.catalog import (
    MIG_CONFIG_BALANCED,
    MIG_CONFIG_DISABLED,
    GpuNodeConfig,
    gpu_labels_and_resources,
    gpu_model,
    mig_layout,
)
from kubesim.clock import SimClock
from kubesim.dra import CLASSES as DRA_CLASSES
from kubesim.dra import SLICES as DRA_SLICES
from kubesim.dra import NodeGpus, device_classes, render_slices
from kubesim.quantity import QuantityError, format_quantity, parse_quantity
from kubesim.store import AlreadyExistsError, Obj, ObjectStore

KUBELET_VERSION = "v1.35.2"
POOL_LABEL = "sim.gpufed.io/node-pool"
SPOT_KEY = "cloud.gpufed.io/spot"
PRICE_ANNOTATION = "sim.gpufed.io/price-per-gpu-hour"
BASE_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "kueue-system")


class FleetError(ValueError):
    """A fleet file that cannot be used; the message names the file, the cluster and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


Quantity = Annotated[str | int | float, Field()]


def _check_quantity(value: Quantity) -> Quantity:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return value


# --------------------------------------------------------------------------- node pools


class TaintSpec(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class MigSpec(_Model):
    strategy: Literal["none", "single", "mixed"] = "none"
    config: str = ""  # all-balanced | all-<profile>; default all-balanced for mixed, all-disabled for none
    gpus: int | None = Field(default=None, ge=0)  # mixed only: MIG-enabled GPUs of the node (default all)
    state: Literal["success", "pending", "rebooting", "failed"] = "success"


class SharingSpec(_Model):
    strategy: Literal["time-slicing", "mps"] = "time-slicing"
    replicas: int = Field(default=1, ge=1)
    rename_by_default: bool = False


class GpuSpec(_Model):
    product: str
    count: int = Field(default=8, ge=1, le=64)
    mig: MigSpec = MigSpec()
    sharing: SharingSpec | None = None
    # device-plugin: nvidia.com/gpu resources and GFD labels; dra: the NVIDIA DRA driver publishes the
    # GPUs as ResourceSlices (kubesim/dra.py) and the node has no GPU resources or labels.
    allocation: Literal["device-plugin", "dra"] = "device-plugin"
    partitionable: bool = False  # dra only: dynamic MIG partitions counted by shared counters

    @field_validator("product")
    @classmethod
    def _known_product(cls, value: str) -> str:
        try:
            return gpu_model(value).name
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None

    @model_validator(mode="after")
    def _valid_mig(self) -> GpuSpec:
        model = gpu_model(self.product)
        if self.allocation == "dra":
            if self.sharing is not None:
                raise ValueError("sharing: not with allocation dra (the DRA driver shares through claims)")
            if self.mig.strategy == "single":
                raise ValueError("mig.strategy: allocation dra publishes MIG devices as mixed or none")
            if self.partitionable and (not model.mig_capable or self.mig.strategy != "none"):
                raise ValueError(
                    "partitionable: needs a MIG-capable product and mig.strategy none (partitions are dynamic)"
                )
        elif self.partitionable:
            raise ValueError("partitionable: only with allocation dra")
        if self.mig.strategy == "none":
            if self.mig.config not in ("", MIG_CONFIG_DISABLED):
                raise ValueError("mig.config needs mig.strategy single or mixed")
            return self
        if not model.mig_capable:
            raise ValueError(f"mig.strategy {self.mig.strategy}: {model.name} is not MIG capable")
        config = self.mig_config
        try:
            layout = mig_layout(model, config)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"mig.config: {exc.args[0]}") from None
        if self.mig.strategy == "single" and len(layout) != 1:
            raise ValueError("mig.config: the single strategy needs one profile on every GPU (all-<profile>)")
        if self.mig.gpus is not None and (self.mig.strategy != "mixed" or self.mig.gpus > self.count):
            raise ValueError("mig.gpus: only with strategy mixed, and at most gpu.count")
        return self

    @property
    def mig_config(self) -> str:
        if self.mig.config:
            return self.mig.config
        return MIG_CONFIG_BALANCED if self.mig.strategy != "none" else MIG_CONFIG_DISABLED


class NumaSpec(_Model):
    zones: int = Field(default=2, ge=1, le=8)
    policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = "single-numa-node"
    scope: Literal["container", "pod"] = "pod"


def _known_metrics(value: list[str]) -> list[str]:
    from kubesim.dcgm import METRIC_NAMES

    unknown = sorted(set(value) - METRIC_NAMES)
    if unknown:
        raise ValueError(
            f"unknown dcgm-exporter metric(s) {', '.join(unknown)}; known: {', '.join(sorted(METRIC_NAMES))}"
        )
    return value


class DcgmPoolSpec(_Model):
    """A node pool's dcgm-exporter metrics switched off, besides the cluster's."""

    exclude: list[str] = []

    @field_validator("exclude")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        return _known_metrics(value)


class DcgmExporterSpec(DcgmPoolSpec):
    """NVIDIA's dcgm-exporter on every GPU node (docs/kubesim.md, GPU health)."""

    enabled: bool = True
    xid_window_seconds: float = Field(default=300.0, gt=0)  # DCGM_EXP_XID_ERRORS_COUNT's window
    fail_after_seconds: float = Field(default=5.0, ge=0)  # fatal XID -> the pod on the GPU fails


class NodeShape(_Model):
    """What every node of a pool looks like."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    gpu: GpuSpec | None = None
    cpu: Quantity = "128"
    memory: Quantity = "1Ti"
    max_pods: int = Field(default=110, ge=1)
    numa: NumaSpec | None = None
    machine: str = ""  # nvidia.com/gpu.machine and node.kubernetes.io/instance-type
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    taints: list[TaintSpec] = []
    dcgm_exporter: DcgmPoolSpec | None = None

    @field_validator("cpu", "memory")
    @classmethod
    def _quantities(cls, value: Quantity) -> Quantity:
        return _check_quantity(value)


class NodePoolSpec(NodeShape):
    count: int = Field(default=1, ge=0)


class CloudPoolSpec(NodeShape):
    """An autoscaled pool: nodes appear `provisioningDelaySeconds` after an unschedulable pod asks."""

    min: int = Field(default=0, ge=0)
    max: int = Field(default=4, ge=0)
    provisioning_delay_seconds: float = Field(default=120.0, ge=0)
    scale_down_idle_seconds: float = Field(default=600.0, ge=0)
    price_per_gpu_hour: float = Field(default=0.0, ge=0)
    spot: bool = False
    # spot only: interruptions per node per simulated hour (0: only on demand), and the notice before it goes
    spot_interruptions_per_hour: float = Field(default=0.0, ge=0)
    spot_notice_seconds: float = Field(default=120.0, ge=0)

    @model_validator(mode="after")
    def _min_le_max(self) -> CloudPoolSpec:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        if self.spot_interruptions_per_hour and not self.spot:
            raise ValueError("spotInterruptionsPerHour needs spot: true")
        return self


# --------------------------------------------------------------------------- kueue


class FlavorResourceSpec(_Model):
    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None

    @field_validator("nominal_quota", "borrowing_limit", "lending_limit")
    @classmethod
    def _quantities(cls, value: Quantity | None) -> Quantity | None:
        return None if value is None else _check_quantity(value)


class FlavorQuotaSpec(_Model):
    name: str
    resources: list[FlavorResourceSpec]


class ResourceGroupSpec(_Model):
    covered_resources: list[str]
    flavors: list[FlavorQuotaSpec]


class ResourceFlavorSpec(_Model):
    name: str
    node_labels: dict[str, str] = {}
    node_taints: list[TaintSpec] = []
    tolerations: list[dict[str, Any]] = []


class PreemptionSpec(_Model):
    """ClusterQueue spec.preemption (what the simulated Kueue honours)."""

    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "Never"
    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Never"


class ClusterQueueSpec(_Model):
    name: str
    cohort: str | None = None
    preemption: PreemptionSpec = PreemptionSpec()
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    namespace_selector: dict[str, Any] = {}
    resource_groups: list[ResourceGroupSpec]


class LocalQueueSpec(_Model):
    name: str
    namespace: str = "default"
    cluster_queue: str


class KueueSpec(_Model):
    flavors: list[ResourceFlavorSpec] = []
    cluster_queues: list[ClusterQueueSpec] = []
    local_queues: list[LocalQueueSpec] = []

    @model_validator(mode="after")
    def _references(self) -> KueueSpec:
        flavors = {f.name for f in self.flavors}
        queues = {q.name for q in self.cluster_queues}
        for cq in self.cluster_queues:
            for group in cq.resource_groups:
                for fq in group.flavors:
                    if fq.name not in flavors:
                        raise ValueError(f"clusterQueue {cq.name}: unknown flavor {fq.name!r}")
        for lq in self.local_queues:
            if lq.cluster_queue not in queues:
                raise ValueError(f"localQueue {lq.name}: unknown clusterQueue {lq.cluster_queue!r}")
        return self


# --------------------------------------------------------------------------- cluster / fleet


class SchedulerSpec(_Model):
    """A scheduler profile the cluster runs; pods name it in spec.schedulerName."""

    name: str
    numa_aware: bool = False  # NodeResourceTopologyMatch (single-numa-node alignment from NRT)
    coscheduling: bool = False  # PodGroup gangs (all or none)


DEFAULT_SCHEDULERS = (
    SchedulerSpec(name="default-scheduler"),
    SchedulerSpec(name="topo-aware-scheduler", numa_aware=True),
    SchedulerSpec(name="scheduler-plugins-scheduler", numa_aware=True, coscheduling=True),
)


class PriorityClassSpec(_Model):
    name: str
    value: int
    global_default: bool = False
    description: str = ""


DEFAULT_PRIORITY_CLASSES = (
    PriorityClassSpec(name="gpu-low", value=1000, description="Preemptible GPU work"),
    PriorityClassSpec(name="gpu-normal", value=10000, description="Default GPU work"),
    PriorityClassSpec(name="gpu-high", value=100000, description="Production GPU work"),
)


class DriverSpec(_Model):
    version: str = "580.159.04"
    cuda_runtime: str = "13.0"


class UserSpec(_Model):
    """A bearer token bound to a user and groups (RBAC decides what it may do); the token is random
    unless given."""

    name: str = Field(min_length=1, pattern=r"^[^\s/]+$")
    groups: list[str] = []
    token: str | None = Field(default=None, min_length=16)


class ClusterSpec(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    region: str
    zone: str = ""
    tier: Literal["on-prem", "cloud"] = "on-prem"
    schedulers: list[SchedulerSpec] = list(DEFAULT_SCHEDULERS)
    priority_classes: list[PriorityClassSpec] = list(DEFAULT_PRIORITY_CLASSES)
    namespaces: list[str] = []
    driver: DriverSpec = DriverSpec()
    node_pools: list[NodePoolSpec] = []
    cloud_pools: list[CloudPoolSpec] = []
    kueue: KueueSpec | None = None
    pod_duration_seconds: float = Field(default=30.0, ge=0)  # when a pod has no duration annotation
    users: list[UserSpec] = []  # tokens bound to users, besides the admin token
    # workload operators installed (their APIs served, their controllers run): jobset, kuberay,
    # training-operator (PyTorchJob), trainer (TrainJob; needs jobset). trainingRuntimes: the
    # ClusterTrainingRuntimes created with trainer.
    operators: list[Literal["jobset", "kuberay", "training-operator", "trainer"]] = []
    training_runtimes: list[str] = ["torch-distributed"]
    dcgm_exporter: DcgmExporterSpec | None = None  # GPU health signals (off unless given)

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterSpec:
        names = [p.name for p in self.node_pools] + [p.name for p in self.cloud_pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node pool names must be unique in a cluster: {', '.join(dupes)}")
        if "default-scheduler" not in {s.name for s in self.schedulers}:
            raise ValueError("schedulers must include default-scheduler")
        if "trainer" in self.operators and "jobset" not in self.operators:
            raise ValueError("operators: trainer runs its TrainJobs as JobSets: install jobset too")
        return self

    @property
    def availability_zone(self) -> str:
        return self.zone or f"{self.region}-1a"

    def scheduler(self, name: str) -> SchedulerSpec | None:
        for s in self.schedulers:
            if s.name == name:
                return s
        return None


class FleetSpec(_Model):
    clusters: list[ClusterSpec]

    @model_validator(mode="after")
    def _unique_clusters(self) -> FleetSpec:
        names = [c.name for c in self.clusters]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"cluster names must be unique: {', '.join(dupes)}")
        return self

    def cluster(self, name: str) -> ClusterSpec:
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(f"no cluster {name!r} in the fleet; known: {', '.join(c.name for c in self.clusters)}")


def _describe(exc: ValidationError, data: Any, source: str) -> str:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = ""
        if len(loc) >= 2 and loc[0] == "clusters" and isinstance(loc[1], int):
            try:
                name = data["clusters"][loc[1]].get("name", f"#{loc[1]}")
            except (KeyError, IndexError, TypeError, AttributeError):
                name = f"#{loc[1]}"
            where = f"cluster {name!r}: "
        path = ""
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{source}: {where}{path}: {message}")
    return "\n".join(lines)


def parse_fleet(data: Any, source: str = "<fleet>") -> FleetSpec:
    """A fleet from already-loaded YAML/JSON data; FleetError names the source, cluster and field."""
    if not isinstance(data, dict):
        raise FleetError(f"{source}: a fleet file is a mapping with a `clusters` list")
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise FleetError(_describe(exc, data, source)) from None


def load_fleet(path: Path) -> FleetSpec:
    """Read and validate a fleet file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FleetError(f"{path}: cannot read the fleet file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetError(f"{path}: not valid YAML: {exc}") from None
    return parse_fleet(data, str(path))


FLEETS_DIR = Path(__file__).parent / "fleets"


def builtin_fleet(name: str) -> Path:
    """Path of a fleet shipped with kubesim (`demo`, `small`)."""
    return FLEETS_DIR / f"{name}.yaml"


# --------------------------------------------------------------------------- objects


_TOPOLOGY_POLICIES = {
    ("single-numa-node", "pod"): "SingleNUMANodePodLevel",
    ("single-numa-node", "container"): "SingleNUMANodeContainerLevel",
    ("restricted", "pod"): "Restricted",
    ("restricted", "container"): "Restricted",
    ("best-effort", "pod"): "BestEffort",
    ("best-effort", "container"): "BestEffort",
    ("none", "pod"): "None",
    ("none", "container"): "None",
}


def _stable_hex(*parts: str, length: int = 8) -> str:
    return hashlib.blake2b("/".join(parts).encode(), digest_size=16).hexdigest()[:length]


def _reserved(capacity: float, share: float, cap: float, whole: float) -> float:
    """What the kubelet keeps for the system (kube-reserved + system-reserved), in `whole` units."""
    if capacity <= cap * 4:
        return 0.0
    return max(whole, math.ceil(min(capacity * share, cap) / whole) * whole)


def dra_gpus(shape: NodeShape, cluster: ClusterSpec) -> NodeGpus | None:
    """What the DRA driver publishes for a node of this pool, or None when the device plugin serves it."""
    gpu = shape.gpu
    if gpu is None or gpu.allocation != "dra":
        return None
    model = gpu_model(gpu.product)
    mig_on = gpu.mig.strategy == "mixed" and gpu.mig_config != MIG_CONFIG_DISABLED
    return NodeGpus(
        model=model,
        count=gpu.count,
        driver_version=cluster.driver.version,
        cuda_driver=cluster.driver.cuda_runtime,
        mig_layout=mig_layout(model, gpu.mig_config) if mig_on else {},
        mig_gpus=(gpu.count if gpu.mig.gpus is None else gpu.mig.gpus) if mig_on else 0,
        partitionable=gpu.partitionable,
        numa_zones=shape.numa.zones if shape.numa else 1,
    )


def _gpu_config(shape: NodeShape, cluster: ClusterSpec) -> GpuNodeConfig | None:
    gpu = shape.gpu
    if gpu is None:
        return None
    sharing = gpu.sharing
    return GpuNodeConfig(
        model=gpu_model(gpu.product),
        count=gpu.count,
        mig_strategy=gpu.mig.strategy,
        mig_config=gpu.mig_config,
        mig_gpus=gpu.mig.gpus,
        mig_config_state=gpu.mig.state,
        sharing=sharing.strategy if sharing else "none",
        replicas=sharing.replicas if sharing else 1,
        rename_by_default=sharing.rename_by_default if sharing else False,
        driver_version=cluster.driver.version,
        cuda_runtime=cluster.driver.cuda_runtime,
        machine=shape.machine,
    )


def _zone_gpu_resources(cfg: GpuNodeConfig, zones: int) -> list[dict[str, int]]:
    """Device resources per NUMA zone: GPU i sits in zone i*zones//count; MIG slices follow their GPU."""
    per_zone: list[dict[str, int]] = [{} for _ in range(zones)]
    replicas = cfg.replicas if cfg.sharing != "none" and cfg.replicas > 1 else 1
    gpu_resource = "nvidia.com/gpu.shared" if replicas > 1 and cfg.rename_by_default else "nvidia.com/gpu"
    mig_on = cfg.mig_strategy != "none" and cfg.mig_config != MIG_CONFIG_DISABLED
    layout = mig_layout(cfg.model, cfg.mig_config) if mig_on else {}
    mig_gpus = cfg.count if cfg.mig_gpus is None or cfg.mig_strategy == "single" else cfg.mig_gpus
    for i in range(cfg.count):
        zone = per_zone[i * zones // cfg.count]
        if mig_on and i < mig_gpus:
            for profile, n in layout.items():
                name = gpu_resource if cfg.mig_strategy == "single" else profile.resource_name
                zone[name] = zone.get(name, 0) + n * replicas
        else:
            zone[gpu_resource] = zone.get(gpu_resource, 0) + replicas
    return per_zone


def _nrt(
    name: str,
    shape: NodeShape,
    cfg: GpuNodeConfig | None,
    cpu: tuple[float, float],
    memory: tuple[float, float],
) -> Obj | None:
    numa = shape.numa
    if numa is None:
        return None
    zones = numa.zones
    devices = _zone_gpu_resources(cfg, zones) if cfg else [{} for _ in range(zones)]
    out_zones = []
    for z in range(zones):
        resources = [
            {
                "name": "cpu",
                "capacity": format_quantity(cpu[0] / zones, "cpu"),
                "allocatable": format_quantity(cpu[1] / zones, "cpu"),
                "available": format_quantity(cpu[1] / zones, "cpu"),
            },
            {
                "name": "memory",
                "capacity": format_quantity(memory[0] // zones, "memory"),
                "allocatable": format_quantity(memory[1] // zones, "memory"),
                "available": format_quantity(memory[1] // zones, "memory"),
            },
        ]
        for res, amount in sorted(devices[z].items()):
            resources.append(
                {"name": res, "capacity": str(amount), "allocatable": str(amount), "available": str(amount)}
            )
        out_zones.append(
            {
                "name": f"node-{z}",
                "type": "Node",
                "costs": [{"name": f"node-{o}", "value": 10 if o == z else 20} for o in range(zones)],
                "resources": resources,
            }
        )
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name, "labels": {}},
        "topologyPolicies": [_TOPOLOGY_POLICIES[(numa.policy, numa.scope)]],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": numa.policy},
            {"name": "topologyManagerScope", "value": numa.scope},
            {"name": "nodeTopologyPodsFingerprintMethod", "value": "with-exclusive-resources"},
        ],
        "zones": out_zones,
    }


class NodeTemplate:
    """A pool's rendered node and NRT, stamped out per node name (cheap: 100 x 1,000 nodes in seconds)."""

    def __init__(
        self, cluster: ClusterSpec, shape: NodeShape, now: float, cloud: CloudPoolSpec | None = None
    ) -> None:
        self.cluster = cluster
        self.shape = shape
        cfg = _gpu_config(shape, cluster)
        self.dra = dra_gpus(shape, cluster)
        if self.dra is not None:
            cfg = None  # the DRA driver publishes the GPUs; no device plugin, no GFD labels
        gpu_labels, gpu_resources = gpu_labels_and_resources(cfg, int(now)) if cfg else ({}, {})
        cpu = parse_quantity(shape.cpu)
        memory = parse_quantity(shape.memory)
        cpu_alloc = cpu - _reserved(cpu, 0.02, 2.0, 1.0)
        mem_alloc = memory - _reserved(memory, 0.05, 8 * 2.0**30, 2.0**30)
        instance_type = shape.machine or (cfg.model.machine if cfg else "cpu-standard")
        labels: dict[str, str] = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": instance_type,
            "topology.kubernetes.io/region": cluster.region,
            "topology.kubernetes.io/zone": cluster.availability_zone,
            POOL_LABEL: shape.name,
            **gpu_labels,
        }
        taints = [t.model_dump(exclude_defaults=False) for t in shape.taints]
        annotations = {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            **shape.annotations,
        }
        if cloud is not None:
            labels["node.kubernetes.io/lifecycle"] = "spot" if cloud.spot else "on-demand"
            annotations[PRICE_ANNOTATION] = f"{cloud.price_per_gpu_hour:g}"
            if cloud.spot:
                labels[SPOT_KEY] = "true"
                taints.append({"key": SPOT_KEY, "value": "true", "effect": "NoSchedule"})
        labels.update(shape.labels)
        capacity = {
            "cpu": format_quantity(cpu, "cpu"),
            "memory": format_quantity(memory, "memory"),
            "ephemeral-storage": "1844Gi",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "pods": str(shape.max_pods),
            **{k: str(v) for k, v in gpu_resources.items()},
        }
        allocatable = {
            **capacity,
            "cpu": format_quantity(cpu_alloc, "cpu"),
            "memory": format_quantity(mem_alloc, "memory"),
            "ephemeral-storage": "1700Gi",
        }
        self.labels = labels
        self.annotations = annotations
        self.taints = taints
        self.capacity = capacity
        self.allocatable = allocatable
        self.provider = "kubesim" if cloud is None else "kubesim-cloud"
        self.nrt = _nrt("", shape, cfg, (cpu, cpu_alloc), (memory, mem_alloc))
        self.conditions_time = now

    def render(self, name: str, now: float) -> tuple[Obj, Obj | None]:
        from kubesim.store import rfc3339

        ts = rfc3339(now)
        host_id = _stable_hex(self.cluster.name, name, length=32)
        octets = int(host_id[:6], 16)
        ip = f"10.{(octets >> 16) & 255}.{(octets >> 8) & 255}.{octets & 255 or 1}"
        spec: dict[str, Any] = {
            "podCIDR": f"10.{octets & 255}.{(octets >> 8) & 255}.0/24",
            "providerID": f"{self.provider}://{self.cluster.name}/{name}",
        }
        if self.taints:
            spec["taints"] = [dict(t) for t in self.taints]
        node: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {**self.labels, "kubernetes.io/hostname": name},
                "annotations": self.annotations,
            },
            "spec": spec,
            "status": {
                "capacity": self.capacity,
                "allocatable": self.allocatable,
                "conditions": _node_conditions(ts),
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": host_id,
                    "systemUUID": f"{host_id[:8]}-{host_id[8:12]}-{host_id[12:16]}-{host_id[16:20]}-{host_id[20:32]}",
                    "bootID": _stable_hex(name, "boot", length=32),
                    "kernelVersion": "6.8.0-60-generic",
                    "osImage": "Ubuntu 24.04.2 LTS",
                    "containerRuntimeVersion": "containerd://2.1.4",
                    "kubeletVersion": KUBELET_VERSION,
                    "kubeProxyVersion": KUBELET_VERSION,
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
                "phase": "Running",
            },
        }
        nrt = None
        if self.nrt is not None:
            nrt = {**self.nrt, "metadata": {"name": name, "labels": {POOL_LABEL: self.shape.name}}}
        return node, nrt


def _node_conditions(ts: str) -> list[Obj]:
    def cond(ctype: str, status: str, reason: str, message: str) -> Obj:
        return {
            "type": ctype,
            "status": status,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
            "reason": reason,
            "message": message,
        }

    return [
        cond(
            "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
        ),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


kubelet_conditions = _node_conditions  # what a healthy node's kubelet reports (the kubelet restores them)


def node_name(cluster: ClusterSpec, pool: str, index: int) -> str:
    return f"{cluster.name}-{pool}-{index}"


def create_node(store: ObjectStore, template: NodeTemplate, name: str, now: float) -> Obj:
    """Create a Node and (when its pool has NUMA zones) its NodeResourceTopology, owned by the node."""
    node, nrt = template.render(name, now)
    created = store.create("nodes", node, owned=True)  # fresh dicts; shared parts are never mutated
    if template.dra is not None:
        owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": created["metadata"]["uid"]}
        for rs in render_slices(name, template.dra):
            rs["metadata"]["ownerReferences"] = [dict(owner, controller=True)]
            store.create(DRA_SLICES, rs, owned=True)
    if nrt is not None:
        nrt["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": created["metadata"]["uid"]}
        ]
        store.create("noderesourcetopologies.topology.node.k8s.io", nrt, owned=True)
    return created


def _quota(value: Quantity | None) -> str | None:
    return None if value is None else str(value)


def kueue_objects(cluster: ClusterSpec) -> Iterator[tuple[str, Obj]]:
    """ResourceFlavors, ClusterQueues and LocalQueues in the v1beta2 storage shape."""
    spec = cluster.kueue
    if spec is None:
        return
    api = "kueue.x-k8s.io/v1beta2"
    for f in spec.flavors:
        rf_spec: Obj = {"nodeLabels": dict(f.node_labels)}
        if f.node_taints:
            rf_spec["nodeTaints"] = [t.model_dump() for t in f.node_taints]
        if f.tolerations:
            rf_spec["tolerations"] = [dict(t) for t in f.tolerations]
        yield (
            "resourceflavors.kueue.x-k8s.io",
            {
                "apiVersion": api,
                "kind": "ResourceFlavor",
                "metadata": {"name": f.name},
                "spec": rf_spec,
            },
        )
    for cq in spec.cluster_queues:
        groups = []
        usage = []
        for g in cq.resource_groups:
            flavors = []
            for fq in g.flavors:
                resources = []
                for r in fq.resources:
                    entry: Obj = {"name": r.name, "nominalQuota": str(r.nominal_quota)}
                    if r.borrowing_limit is not None:
                        entry["borrowingLimit"] = _quota(r.borrowing_limit)
                    if r.lending_limit is not None:
                        entry["lendingLimit"] = _quota(r.lending_limit)
                    resources.append(entry)
                flavors.append({"name": fq.name, "resources": resources})
                usage.append(
                    {
                        "name": fq.name,
                        "resources": [{"name": r.name, "total": "0", "borrowed": "0"} for r in fq.resources],
                    }
                )
            groups.append({"coveredResources": list(g.covered_resources), "flavors": flavors})
        cq_spec: Obj = {
            "namespaceSelector": dict(cq.namespace_selector),
            "queueingStrategy": cq.queueing_strategy,
            "resourceGroups": groups,
            "preemption": {
                "reclaimWithinCohort": cq.preemption.reclaim_within_cohort,
                "withinClusterQueue": cq.preemption.within_cluster_queue,
            },
            "stopPolicy": "None",
        }
        if cq.cohort:
            cq_spec["cohortName"] = cq.cohort
        yield (
            "clusterqueues.kueue.x-k8s.io",
            {
                "apiVersion": api,
                "kind": "ClusterQueue",
                "metadata": {"name": cq.name},
                "spec": cq_spec,
                "status": {
                    "conditions": [
                        {
                            "type": "Active",
                            "status": "True",
                            "reason": "Ready",
                            "message": "Can admit new workloads",
                        }
                    ],
                    "flavorsReservation": usage,
                    "flavorsUsage": usage,
                    "pendingWorkloads": 0,
                    "reservingWorkloads": 0,
                    "admittedWorkloads": 0,
                },
            },
        )
    for lq in spec.local_queues:
        yield (
            "localqueues.kueue.x-k8s.io",
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": lq.name, "namespace": lq.namespace},
                "spec": {"clusterQueue": lq.cluster_queue},
                "status": {
                    "conditions": [
                        {
                            "type": "Active",
                            "status": "True",
                            "reason": "Ready",
                            "message": "Can submit new workloads to localQueue",
                        }
                    ],
                    "pendingWorkloads": 0,
                    "reservingWorkloads": 0,
                    "admittedWorkloads": 0,
                    "flavorsReservation": [],
                    "flavorsUsage": [],
                },
            },
        )


def _create_quietly(store: ObjectStore, key: str, obj: Obj) -> None:
    with contextlib.suppress(AlreadyExistsError):
        store.create(key, obj)


def populate(store: ObjectStore, cluster: ClusterSpec, clock: SimClock) -> None:
    """Create a fresh cluster's objects: namespaces, nodes (+NRT), priority classes, Kueue queues."""
    now = clock.now()
    namespaces = list(BASE_NAMESPACES) + list(cluster.namespaces)
    if cluster.kueue:
        namespaces += [lq.namespace for lq in cluster.kueue.local_queues]
    for ns in dict.fromkeys(namespaces):
        _create_quietly(
            store,
            "namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
        )
    for pc in cluster.priority_classes:
        _create_quietly(
            store,
            "priorityclasses.scheduling.k8s.io",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc.name},
                "value": pc.value,
                "globalDefault": pc.global_default,
                "preemptionPolicy": "PreemptLowerPriority",
                "description": pc.description,
            },
        )
    if any(
        p.gpu is not None and p.gpu.allocation == "dra" for p in [*cluster.node_pools, *cluster.cloud_pools]
    ):
        for dc in device_classes():
            _create_quietly(store, DRA_CLASSES, dc)
    for pool in cluster.node_pools:
        template = NodeTemplate(cluster, pool, now)
        for i in range(pool.count):
            create_node(store, template, node_name(cluster, pool.name, i), now)
    for cloud in cluster.cloud_pools:
        template = NodeTemplate(cluster, cloud, now, cloud=cloud)
        for i in range(cloud.min):
            create_node(store, template, node_name(cluster, cloud.name, i), now)
    for key, obj in kueue_objects(cluster):
        _create_quietly(store, key, obj)
    from kubesim.operators import populate_operators

    populate_operators(store, cluster)  # the ClusterTrainingRuntimes of a Trainer install


# --------------------------------------------------------------------------- scale


_SYNTHETIC_PRODUCTS = ("H100-80GB", "A100-80GB", "H200-141GB", "L4")


def synthetic_fleet(
    clusters: int, nodes_per_cluster: int, gpus_per_node: int = 8, dcgm_exporter: bool = False
) -> FleetSpec:
    """A large uniform fleet for scale tests: products rotate per cluster, 2 NUMA zones where GPUs split evenly."""
    out = []
    for c in range(clusters):
        product = _SYNTHETIC_PRODUCTS[c % len(_SYNTHETIC_PRODUCTS)]
        cloud = c % 5 == 4
        numa = NumaSpec(zones=2) if gpus_per_node % 2 == 0 else None
        out.append(
            ClusterSpec(
                name=f"sim-{c:03d}",
                region="us-east" if cloud else "eu-west",
                tier="cloud" if cloud else "on-prem",
                node_pools=[
                    NodePoolSpec(
                        name="gpu",
                        count=nodes_per_cluster,
                        gpu=GpuSpec(product=product, count=gpus_per_node),
                        numa=numa,
                    )
                ],
                dcgm_exporter=DcgmExporterSpec() if dcgm_exporter else None,
            )
        )
    return FleetSpec(clusters=out)
