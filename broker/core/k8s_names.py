"""The broker's Kubernetes vocabulary: resource names, labels, annotations and taint keys, said once.

Owns the strings the broker reads from and writes into member clusters, and the two spellings of a MIG
profile: the profile name of NVIDIA's tables ("1g.10gb+me") and its extended-resource form under the
mixed strategy (nvidia.com/mig-1g.10gb.me, where '+' becomes '.'). Every other module imports these
names from here; nothing else rewrites "+me" / ".me". Pure: no I/O.
"""

from __future__ import annotations

__all__ = [
    "ATTEMPT_LABEL",
    "CLOSED_ANNOTATION",
    "CLUSTER_ANNOTATION",
    "DRA_DRIVER",
    "DRA_GPU_CLASS",
    "DRA_MIG_CLASS",
    "DURATION_ANNOTATION",
    "GPU",
    "GPU_SHARED",
    "GPU_TAINT_KEY",
    "HOSTNAME_LABEL",
    "JOB_ID_LABEL",
    "L_COUNT",
    "L_FAMILY",
    "L_MEMORY",
    "L_MIG_STATE",
    "L_MIG_STRATEGY",
    "L_PRODUCT",
    "L_REPLICAS",
    "MIG_PREFIX",
    "OFFERED_BOTH",
    "OFFERED_DEVICE_PLUGIN",
    "OFFERED_DRA",
    "POD_GROUP_LABEL",
    "QUEUE_LABEL",
    "SPOT_TAINT_KEYS",
    "canonical_profile",
    "mig_resource",
    "profile_of_resource",
    "same_profile",
]

# --- extended resources (device plugin)
GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"

# --- Dynamic Resource Allocation (NVIDIA DRA driver, resource.k8s.io/v1; reference 8)
DRA_DRIVER = "gpu.nvidia.com"  # the driver name on ResourceSlices and allocation results
DRA_GPU_CLASS = "gpu.nvidia.com"  # DeviceClass of whole GPUs
DRA_MIG_CLASS = "mig.nvidia.com"  # DeviceClass of MIG devices

# --- taints
GPU_TAINT_KEY = "nvidia.com/gpu"
# Taints that mark spot/preemptible capacity; the broker tolerates them only on clusters declared spot.
SPOT_TAINT_KEYS = (
    "cloud.gpufed.io/spot",
    "cloud.google.com/gke-spot",
    "kubernetes.azure.com/scalesetpriority",
)

# --- GPU feature discovery node labels (reference 1)
L_PRODUCT = "nvidia.com/gpu.product"
L_COUNT = "nvidia.com/gpu.count"
L_MEMORY = "nvidia.com/gpu.memory"
L_FAMILY = "nvidia.com/gpu.family"
L_REPLICAS = "nvidia.com/gpu.replicas"
L_MIG_STRATEGY = "nvidia.com/mig.strategy"
L_MIG_STATE = "nvidia.com/mig.config.state"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# --- what the broker writes on the objects it creates
JOB_ID_LABEL = "gpufed.io/job-id"
ATTEMPT_LABEL = "gpufed.io/attempt"
CLUSTER_ANNOTATION = "gpufed.io/cluster"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
DURATION_ANNOTATION = "sim.gpufed.io/duration-seconds"
# What the broker needs to rebuild a job's record from its Job after a Redis loss (broker.ha.recovery).
REQUEST_ANNOTATION = "gpufed.io/request"  # the submitted JobRequest as compact JSON
IDEMPOTENCY_ANNOTATION = "gpufed.io/idempotency-key"
SUBMITTED_AT_ANNOTATION = "gpufed.io/submitted-at"  # epoch seconds the job was accepted
FEDERATION_ANNOTATION = "gpufed.io/federation"  # the store prefix of the broker that owns the Job
# Written on a Job once the broker has recorded its end ("SUCCEEDED at <epoch>"): a rebuild skips it.
CLOSED_ANNOTATION = "gpufed.io/closed"

_ME_PROFILE = "+me"
_ME_RESOURCE = ".me"


def canonical_profile(name: str) -> str:
    """A MIG profile in the tables' spelling: "1g.10gb.me" and "1g.10gb+me" both give "1g.10gb+me"."""
    text = name.strip()
    if text.endswith(_ME_RESOURCE):
        return text[: -len(_ME_RESOURCE)] + _ME_PROFILE
    return text


def mig_resource(profile: str) -> str:
    """The mixed-strategy extended resource of a profile: 1g.10gb+me -> nvidia.com/mig-1g.10gb.me."""
    return MIG_PREFIX + canonical_profile(profile).replace(_ME_PROFILE, _ME_RESOURCE)


def profile_of_resource(resource: str) -> str:
    """The profile a mixed-strategy resource names: nvidia.com/mig-1g.10gb.me -> 1g.10gb+me."""
    return canonical_profile(resource[len(MIG_PREFIX) :])


def same_profile(a: str, b: str) -> bool:
    """Whether two spellings name the same MIG profile."""
    return canonical_profile(a) == canonical_profile(b)


# How a cluster offers a product's whole GPUs (ProductCapacity.offered, ClusterTraits.gpu_allocation)
OFFERED_DEVICE_PLUGIN = "device-plugin"
OFFERED_DRA = "dra"
OFFERED_BOTH = "both"
