"""The broker's vocabulary: frozen dataclasses that every layer shares.

Owns the shapes of what the broker knows and decides, nothing else: no I/O, no clock (times are plain
epoch seconds handed in by callers), no parsing of Kubernetes objects (that is capacity.py).

    NodeFacts        one node as level 1/2 need it (GPU product, whole GPUs, MIG slices, NUMA zones, taints)
    ClusterSnapshot  all NodeFacts of one cluster at one moment, plus its Kueue queues
    ClusterSummary   the O(products) aggregate level 1 reads: histograms instead of nodes
    MemberNamespace  a tenant namespace in a member cluster: its ResourceQuotas and LimitRanges
    ClusterTraits    what the operator declared about a cluster (tier, region, price, schedulers, Kueue)
    JobRequest       what a user asked for
    Placement        level-1 decision: a cluster and the resource to ask it for
    NoFit            level-1 rejection as data: "0/N clusters are available: ..." (never_fits: no capacity helps)
    Code             a level-1 verdict's code (kube-scheduler's: unschedulable, unresolvable, error)
    Reservation      GPUs assumed for a placement until the cluster shows the pods
    JobRecord        a job's durable state; JobEvent one transition of it
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from functools import cached_property
from typing import Any

from broker.core.gpu_health import ClusterGpuHealth
from broker.core.k8s_names import OFFERED_DRA, mig_resource
from broker.core.topology import CliqueCapacity, NvlinkClique

TENANT_PLACEHOLDER = "{tenant}"  # in ClusterTraits.tenant_namespace


class MigStrategy(StrEnum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class Tier(StrEnum):
    ONPREM = "on-prem"
    CLOUD = "cloud"


class Health(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNREACHABLE = "unreachable"
    FORBIDDEN = "forbidden"
    UNKNOWN = "unknown"


class Code(IntEnum):
    """A level-1 verdict's code, kube-scheduler's Status codes (framework.Status carries one)."""

    SUCCESS = 0
    UNSCHEDULABLE = 1  # might fit later (capacity frees up)
    UNSCHEDULABLE_AND_UNRESOLVABLE = 2  # will not fit whatever frees up (wrong product, not allowed)
    ERROR = 3  # a plugin failed; the cluster is skipped


class FailoverPolicy(StrEnum):
    """What happens to a job when its cluster is lost or its pods are disrupted (node lost, spot, ...)."""

    REQUEUE = "requeue"  # back to the queue with attempt + 1, placed again at once
    NEVER = "never"  # FAILED with the reason


class ImagePullFailure(StrEnum):
    """What happens to a job whose image cannot be pulled for imagePullFailSeconds (docs/health.md)."""

    FAIL = "fail"  # FAILED with the registry's message (another cluster would pull the same image)
    REQUEUE = "requeue"  # withdrawn from that cluster and placed again elsewhere (a cluster-local registry)


class JobState(StrEnum):
    QUEUED = "QUEUED"
    PLACED = "PLACED"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"  # QUEUED when the state store lost its data: no Job anywhere (broker.ha.recovery)

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST)


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True, slots=True)
class GpuProduct:
    """A GPU model. `name` is the catalog name (H100-80GB) or, when unknown, the raw GFD product string."""

    name: str
    memory_mib: int
    family: str = ""
    known: bool = True


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG GPU-instance profile of one GPU product, from the profile tables (reference 1.5)."""

    name: str  # "1g.10gb" or "1g.10gb+me"
    compute_slices: int  # the "g": sevenths of the GPU's compute
    memory_gb: int  # nominal GB in the name
    max_per_gpu: int  # homogeneous maximum

    @property
    def resource_name(self) -> str:
        """The extended resource under the mixed strategy: '+' becomes '.' (nvidia.com/mig-1g.10gb.me)."""
        return mig_resource(self.name)


@dataclass(frozen=True, slots=True)
class MigSlices:
    """Allocatable and allocated slices of one MIG profile on one node."""

    profile: str
    allocatable: int
    allocated: int

    @property
    def free(self) -> int:
        return max(0, self.allocatable - self.allocated)


@dataclass(frozen=True, slots=True)
class NumaZone:
    """One NUMA zone of a node, from its NodeResourceTopology."""

    name: str
    gpus_allocatable: int
    gpus_available: int
    cpu_available_millis: int | None = None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class NodeFacts:
    """One node as the broker needs it. All counts are of schedulable units, already parsed."""

    name: str
    product: GpuProduct | None  # None: the node has no NVIDIA GPU
    gpu_count: int = 0  # physical GPUs (gpu.count label, or the MIG parents)
    gpus_allocatable: int = 0  # whole, exclusive GPUs (nvidia.com/gpu, not shared, not MIG-single slices)
    gpus_allocated: int = 0
    mig_strategy: MigStrategy = MigStrategy.NONE
    mig_settled: bool = True  # False while nvidia.com/mig.config.state is not 'success'
    mig: tuple[MigSlices, ...] = ()
    shared_replicas: int = 1  # time-slicing / MPS replicas; > 1 means the GPUs are shared, not whole
    shared_allocatable: int = 0
    shared_allocated: int = 0
    numa_zones: tuple[NumaZone, ...] = ()
    topology_policy: str = "none"  # none | best-effort | restricted | single-numa-node
    topology_scope: str = "container"  # container | pod
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    cpu_allocatable_millis: int = 0
    cpu_allocated_millis: int = 0
    memory_allocatable_bytes: int = 0
    memory_allocated_bytes: int = 0
    dra: bool = False  # the GPUs come from DRA ResourceSlices (gpu.nvidia.com), not the device plugin

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus_allocatable - self.gpus_allocated)

    @property
    def largest_numa_gpu_block(self) -> int:
        """Most free GPUs inside one NUMA zone; without NUMA data, all free GPUs count as one zone."""
        if not self.numa_zones:
            return self.gpus_free
        return max((z.gpus_available for z in self.numa_zones), default=0)


@dataclass(frozen=True)
class QueueHeadroom:
    """A Kueue ClusterQueue's quota for one flavor and resource, and what is used of it."""

    cluster_queue: str
    flavor: str
    resource: str
    nominal: int
    used: int
    borrowing_limit: int | None = None
    local_queues: tuple[str, ...] = ()

    @property
    def headroom(self) -> int:
        return max(0, self.nominal - self.used)


@dataclass(frozen=True)
class ClusterSnapshot:
    """All facts of one cluster at one moment: what capacity.summarize() turns into a ClusterSummary."""

    cluster: str
    nodes: tuple[NodeFacts, ...]
    queues: tuple[QueueHeadroom, ...] = ()
    observed_at: float = 0.0
    resource_version: str = ""
    bad_nodes: tuple[str, ...] = ()  # nodes whose objects could not be parsed (reported, skipped)


@dataclass(frozen=True)
class ProductCapacity:
    """Whole-GPU capacity of one product in one cluster, over ready and schedulable nodes.

    nodes_by_free[k] = number of placement domains with exactly k free GPUs. A domain is a node, or one
                       NUMA zone of a node whose topology-manager policy is single-numa-node (the kubelet
                       refuses a pod whose GPUs span zones there): "one pod of g GPUs fits" reads alike.
    numa_blocks[k]   = number of nodes whose largest free GPU block inside one NUMA zone is k.
    domains_by_size[k] = domains of k allocatable GPUs, busy or not (pods of g GPUs run at once, at most).
    single_numa_node_free = most free GPUs on one single-numa-node node (zones summed): when it reaches a
                       pod's GPUs and nodes_by_free does not, the policy is why, and the reason says so.
    """

    product: str
    memory_mib: int
    total: int  # physical GPUs, all nodes
    allocatable: int
    allocated: int
    free: int
    nodes_by_free: tuple[int, ...] = ()
    numa_blocks: tuple[int, ...] = ()
    nodes: int = 0
    gfd_products: tuple[str, ...] = ()  # the gpu.product label values seen (parent product, no suffix)
    shared_allocatable: int = 0  # time-sliced / MPS replicas on nodes that take the broker's pods
    shared_free: int = 0  # of those, not requested by pods
    single_numa_node_free: int = 0
    domains_by_size: tuple[int, ...] = ()  # [k] = placement domains (as nodes_by_free counts) of k GPUs
    whole_nodes_by_free: tuple[int, ...] = ()  # [k] = nodes with k free GPUs, zones summed (for people)
    offered: str = "device-plugin"  # served as device-plugin | dra | both (capacity.rollup.combine_kinds)
    dra: bool = False  # the counts above are those of the DRA nodes (the kind level 2 writes)
    whole_gpus: int = 0  # whole GPUs of the counted kind on every node, usable or not

    @property
    def max_free_on_one_node(self) -> int:
        return max((k for k, n in enumerate(self.nodes_by_free) if n), default=0)

    def pods_that_fit(self, gpus_per_pod: int) -> int:
        """How many pods of `gpus_per_pod` GPUs fit, each on one node (first-fit over the histogram)."""
        if gpus_per_pod <= 0:
            return 0
        return sum(n * (k // gpus_per_pod) for k, n in enumerate(self.nodes_by_free))

    def nodes_with_numa_block(self, gpus: int) -> int:
        return sum(n for k, n in enumerate(self.numa_blocks) if k >= gpus)


@dataclass(frozen=True)
class MigCapacity:
    """Free slices of one MIG profile of one product in one cluster."""

    product: str
    profile: str
    resource_name: str
    allocatable: int
    free: int
    largest_free_on_node: int
    settled: bool = True
    gfd_products: tuple[str, ...] = ()  # parent gpu.product values seen (without -MIG-<profile>)


@dataclass(frozen=True)
class QuotaStatus:
    """One ResourceQuota of a member namespace: spec.hard and status.used, in the broker's units (cpu in
    millicores, memory in bytes, devices and object counts whole), keyed as the quota keys them
    ("requests.nvidia.com/gpu", "limits.cpu", "cpu", "count/jobs.batch", "pods")."""

    name: str
    hard: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LimitRangeItem:
    """One item of a LimitRange (type Container or Pod), in the broker's units (as QuotaStatus)."""

    type: str
    default: Mapping[str, int] = field(default_factory=dict)  # default limits
    default_request: Mapping[str, int] = field(default_factory=dict)
    min: Mapping[str, int] = field(default_factory=dict)
    max: Mapping[str, int] = field(default_factory=dict)
    max_limit_request_ratio: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MemberNamespace:
    """A tenant namespace of a member cluster as the pollers saw it: its quotas and limits."""

    name: str
    quotas: tuple[QuotaStatus, ...] = ()
    limits: tuple[LimitRangeItem, ...] = ()


@dataclass(frozen=True)
class ClusterSummary:
    """What level 1 reads about a cluster: aggregates, health and the operator's declared traits."""

    cluster: str
    tier: Tier = Tier.ONPREM
    region: str = ""
    health: Health = Health.UNKNOWN
    heartbeat: float = 0.0  # epoch seconds of the last successful observation
    # epoch seconds the poller wrote this summary (0: not told): the poller's own liveness, where `heartbeat` is
    # the cluster's. Every poller silent at once means the broker is blind (failover.pollers_silent).
    published_at: float = 0.0
    health_reason: str = ""  # why it is not healthy, as a person reads it ("connection refused", ...)
    health_since: float = 0.0  # epoch seconds since when `health` holds
    version: int = 0  # bumps on every write of this summary
    products: tuple[ProductCapacity, ...] = ()
    mig: tuple[MigCapacity, ...] = ()
    queues: tuple[QueueHeadroom, ...] = ()
    price_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    autoscale_headroom: Mapping[str, int] = field(default_factory=dict)  # product -> GPUs still addable
    nodes_total: int = 0
    nodes_ready: int = 0
    bad_nodes: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    # tenant namespaces with their quotas and limits, when watched (observed); one not listed does not exist
    namespaces: tuple[MemberNamespace, ...] = ()
    namespaces_observed: bool = False
    cliques: tuple[CliqueCapacity, ...] = ()  # NVLink cliques, by (product, clique) (docs/topology.md)
    # workload kinds' APIs served ("jobset.x-k8s.io/v1alpha2") and ClusterTrainingRuntimes (kind_objects.py)
    workload_apis: tuple[str, ...] = ()
    training_runtimes: tuple[str, ...] = ()
    workload_apis_observed: bool = False
    gpu_health: ClusterGpuHealth = field(default_factory=ClusterGpuHealth)  # unhealthy GPUs (docs/health.md)

    def namespace(self, name: str) -> MemberNamespace | None:
        return next((n for n in self.namespaces if n.name == name), None)

    def product(self, name: str) -> ProductCapacity | None:
        return next((p for p in self.products if p.product == name), None)

    @cached_property
    def derived(self) -> dict[Any, Any]:
        """Memo of values the pure core derives from this summary (placement's per-product, per-size
        indexes). Not a field: never compared, copied by dataclasses.replace() or stored. Valid because
        a summary never changes once built; a new observation is a new summary."""
        return {}


@dataclass(frozen=True)
class ClusterTraits:
    """What the operator declared about a member cluster (from clusters.yaml), as level 1/2 need it."""

    name: str
    tier: Tier = Tier.ONPREM
    region: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    price_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    kueue_local_queue: str | None = None  # set where the cluster runs Kueue
    topology_scheduler: str | None = None  # schedulerName of a NUMA-aware profile
    gang_scheduler: str | None = None  # schedulerName of a coscheduling profile
    spot: bool = False
    namespace: str = "default"
    gpu_allocation: str = "auto"  # auto (per product, as the nodes publish) | device-plugin | dra (override)
    # Tenancy in the member cluster (docs/tenancy.md): a tenant's jobs run in this pattern's namespace
    # ("gpufed-{tenant}"); None: every tenant's in `namespace`. The broker creates a missing one (and its
    # Kueue LocalQueue, pointing at `kueue_cluster_queue`) only with create_namespaces.
    tenant_namespace: str | None = None
    create_namespaces: bool = False
    kueue_cluster_queue: str | None = None
    compute_domains: bool = False  # runs the NVIDIA DRA driver's ComputeDomains (docs/topology.md)
    workload_api: bool = False  # serves scheduling.k8s.io/v1alpha1 Workload: gangs hinted through it

    @property
    def dra(self) -> bool:  # declared gpuAllocation: dra (Placement.dra says how a placement's pods ask)
        return self.gpu_allocation == OFFERED_DRA

    def namespace_for(self, tenant: str) -> str:
        """The namespace a tenant's jobs run in on this cluster."""
        if self.tenant_namespace is None:
            return self.namespace
        return self.tenant_namespace.replace(TENANT_PLACEHOLDER, tenant)

    def namespaces_for(self, tenants: Iterable[str]) -> tuple[str, ...]:
        """Every namespace the broker's Jobs may be in on this cluster for these tenants (sorted), the
        cluster's own `namespace` included (jobs placed before a pattern was set live there)."""
        return tuple(sorted({self.namespace, *(self.namespace_for(t) for t in tenants)}))


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class MigNeed:
    """A MIG request by need: at least this much memory and this many compute sevenths."""

    memory_gb: int
    compute_slices: int = 1


@dataclass(frozen=True)
class JobRequest:
    """What a user submitted. Validated at the edge (api/config); here it is plain data."""

    name: str
    tenant: str = "default"
    namespace: str = "default"
    image: str = "busybox:1.36"
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    # The kept pod-template fields, as Kubernetes objects (validated at the edge, written by level 2):
    env: tuple[Mapping[str, Any], ...] = ()  # EnvVar: {name, value} or {name, valueFrom}
    env_from: tuple[Mapping[str, Any], ...] = ()  # EnvFromSource: {configMapRef} / {secretRef}
    volumes: tuple[Mapping[str, Any], ...] = ()  # Volume: {name, configMap} / {secret} / {emptyDir}
    volume_mounts: tuple[Mapping[str, Any], ...] = ()  # VolumeMount: {name, mountPath, ...}
    working_dir: str | None = None
    image_pull_policy: str | None = None
    pod_annotations: Mapping[str, str] = field(default_factory=dict)  # onto the pod template
    gpus_per_pod: int = 0  # whole GPUs per pod
    pods: int = 1  # > 1 is a gang: all pods or none
    gpu_products: tuple[str, ...] = ()  # acceptable catalog products; empty = any
    min_gpu_memory_mib: int = 0
    mig_profile: str | None = None  # by name, e.g. "1g.10gb"
    mig_need: MigNeed | None = None  # or by need, mapped per product to the smallest fitting profile
    mig_slices_per_pod: int = 1
    numa_aligned: bool = False
    cpu_millis_per_pod: int = 1000
    memory_mib_per_pod: int = 1024
    allow_burst: bool = False
    max_wait_seconds: float | None = None  # burst once the predicted on-prem wait is over this (burst.md)
    max_price_per_gpu_hour: float | None = None
    priority_class: str | None = None
    clusters: tuple[str, ...] = ()  # restrict to these clusters; empty = any
    duration_seconds: float | None = None  # how long the workload runs (kubesim honours it)
    labels: Mapping[str, str] = field(default_factory=dict)
    failover: FailoverPolicy = FailoverPolicy.REQUEUE
    nvlink_clique: NvlinkClique = NvlinkClique.NONE  # every pod in one NVLink clique (docs/topology.md)
    source: str = ""  # where it was submitted other than the API: "hub:jobs.batch/<ns>/<name>" (docs/hub.md)
    # checkpoint: {gracePeriodSeconds}: a stop is SIGTERM with this grace and a resume (docs/migration.md)
    checkpoint_grace_seconds: int | None = None
    on_image_pull_failure: ImagePullFailure = ImagePullFailure.FAIL
    # set by the broker for one placement, never by a user: clusters left out (JobRecord.avoid; allowlist.py)
    avoid_clusters: tuple[str, ...] = ()
    # a workload kind's {apiVersion, kind, spec} as submitted (broker/workload/kinds); None: a batch/v1 Job
    workload: Mapping[str, Any] | None = None

    @property
    def wants_mig(self) -> bool:
        return self.mig_profile is not None or self.mig_need is not None

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_pod * self.pods


@dataclass(frozen=True)
class Placement:
    """A level-1 decision: the cluster, the product and the resource each pod asks for."""

    cluster: str
    product: str
    resource_name: str  # nvidia.com/gpu or nvidia.com/mig-<profile>
    units_per_pod: int
    pods: int
    score: int
    scores: Mapping[str, int] = field(default_factory=dict)  # per score plugin, 0..100 before weights
    mig_profile: str | None = None
    burst: bool = False
    preferred_nodes: tuple[str, ...] = ()  # for level-2 preferred node affinity, best first
    gfd_products: tuple[str, ...] = ()  # parent gpu.product values of the product in that cluster
    clique: str | None = None  # the NVLink clique level 2 pins the pods to (docs/topology.md)
    dra: bool = False  # the pods ask through a ResourceClaimTemplate (the product's counted kind is DRA)
    avoid_nodes: tuple[str, ...] = ()  # level 2 keeps the pods off these nodes (their GPUs failed this job)

    @property
    def total_units(self) -> int:
        return self.units_per_pod * self.pods


@dataclass(frozen=True)
class ClusterRejection:
    cluster: str
    plugin: str
    reason: str  # "no node with 8 free H100-80GB"; rejections with the same reason are counted together
    best: int | None = None  # how close this cluster came (e.g. 6 free on one node); named in the message
    code: Code = Code.UNSCHEDULABLE  # UNSCHEDULABLE_AND_UNRESOLVABLE: no change of free capacity helps


@dataclass(frozen=True)
class NoFit:
    """Level-1 rejection as data, in Karmada's FitError shape."""

    total_clusters: int
    rejections: tuple[ClusterRejection, ...]

    @property
    def never_fits(self) -> bool:
        """True when every cluster rejected the job as unresolvable (wrong product, not allowed, over the
        price cap, no quota for the resource): no capacity freeing up will help, only a change of the
        fleet (clusters, their products, prices, queues) or of the job. Errors and capacity shortfalls are
        resolvable. An empty fleet never fits either."""
        return len(self.rejections) == self.total_clusters and all(
            r.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for r in self.rejections
        )

    @property
    def message(self) -> str:
        counts: dict[str, int] = {}
        best: dict[str, ClusterRejection] = {}
        for r in self.rejections:
            counts[r.reason] = counts.get(r.reason, 0) + 1
            top = best.get(r.reason)
            if r.best is not None and (
                top is None or top.best is None or (-r.best, r.cluster) < (-top.best, top.cluster)
            ):
                best[r.reason] = r
        parts = []
        for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            top = best.get(reason)
            parts.append(f"{n} {reason}" + (f" (best: {top.best} on {top.cluster})" if top else ""))
        head = f"0/{self.total_clusters} clusters are available"
        return head + (": " + ", ".join(parts) + "." if parts else ".")


@dataclass(frozen=True)
class Reservation:
    """GPUs assumed for a placement (Kueue's 'assume') until the cluster shows the pods.

    `units` = pods x units per pod. Owned by the placer (`owner`) and the attempt that made it (see the
    store); `commit` orders a cluster's reservations as they were committed (the store's; 0: unknown)."""

    job_id: str
    attempt: int
    cluster: str
    product: str
    resource_name: str
    units: int
    created_at: float
    expires_at: float
    pods: int = 1
    owner: str = ""
    clique: str | None = None  # the NVLink clique its pods are held in (Placement.clique)
    commit: int = 0

    @property
    def units_per_pod(self) -> int:
        return self.units // self.pods if self.pods > 0 else self.units


@dataclass(frozen=True)
class JobRecord:
    """A job's durable state, as kept in the StateStore."""

    id: str
    request: JobRequest
    state: JobState = JobState.QUEUED
    attempt: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    cluster: str | None = None
    placement: Placement | None = None
    reason: str = ""  # human-readable why of the current state
    workload_name: str | None = None  # the batch/v1 Job name in the member cluster
    idempotency_key: str | None = None
    dispatch_failures: int = 0  # creates the member clusters refused or could not take
    not_before: float = 0.0  # no placement attempt before this time (backoff after a failed dispatch)
    trace_parent: str | None = None  # W3C traceparent of the job's submit span: every step joins its trace
    warnings: tuple[str, ...] = ()  # said at submit: never fits any cluster (scheduler.never_fit)
    # docs/migration.md: the checkpoint reference the next attempt resumes from (GPUFED_RESUME_FROM), and
    # the clusters a moved job's next attempt may go to (empty: the request's own `clusters`)
    resume_from: str | None = None
    move_to: tuple[str, ...] = ()
    # (cluster, until): clusters an attempt was withdrawn from for member trouble (workload/member_trouble.py),
    # not offered to this job again before `until` (epoch seconds)
    avoid: tuple[tuple[str, float], ...] = ()
    avoid_nodes: tuple[tuple[str, str, float], ...] = ()  # (cluster, node, until): a GPU failed it there


@dataclass(frozen=True)
class JobEvent:
    job_id: str
    at: float
    state: JobState
    attempt: int
    reason: str = ""
    cluster: str | None = None
    trace_id: str | None = None  # the job's trace (32 hex), to find its spans from its timeline
