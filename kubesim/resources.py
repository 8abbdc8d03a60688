"""The API resources a simulated cluster serves: group, versions, plural, kind, scope, short names.

This table drives discovery (/api, /apis, per group-version resource lists), URL routing and the store's
keys. A resource's key is `plural` for the core group and `plural.group` otherwise (as kubectl names them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core group
    versions: tuple[str, ...]  # served versions, preferred (storage) first
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    categories: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def api_version(self, version: str | None = None) -> str:
        v = version or self.versions[0]
        return v if not self.group else f"{self.group}/{v}"


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", ("v1",), "namespaces", "Namespace", False, ("ns",)),
    ResourceType("", ("v1",), "nodes", "Node", False, ("no",)),
    ResourceType(
        "", ("v1",), "pods", "Pod", True, ("po",), ("status", "binding", "eviction", "log"), ("all",)
    ),
    ResourceType("", ("v1",), "events", "Event", True, ("ev",), ()),
    ResourceType("", ("v1",), "resourcequotas", "ResourceQuota", True, ("quota",)),
    ResourceType("", ("v1",), "limitranges", "LimitRange", True, ("limits",), ()),
    ResourceType("", ("v1",), "secrets", "Secret", True, (), ()),
    ResourceType("", ("v1",), "serviceaccounts", "ServiceAccount", True, ("sa",), ("token",)),
    ResourceType("batch", ("v1",), "jobs", "Job", True, (), ("status",), ("all",)),
    ResourceType("policy", ("v1",), "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",)),
    ResourceType("rbac.authorization.k8s.io", ("v1",), "roles", "Role", True, (), ()),
    ResourceType("rbac.authorization.k8s.io", ("v1",), "rolebindings", "RoleBinding", True, (), ()),
    ResourceType("rbac.authorization.k8s.io", ("v1",), "clusterroles", "ClusterRole", False, (), ()),
    ResourceType(
        "rbac.authorization.k8s.io", ("v1",), "clusterrolebindings", "ClusterRoleBinding", False, (), ()
    ),
    ResourceType(
        "authorization.k8s.io", ("v1",), "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, (), ()
    ),
    ResourceType("authentication.k8s.io", ("v1",), "selfsubjectreviews", "SelfSubjectReview", False, (), ()),
    ResourceType(
        "authorization.k8s.io", ("v1",), "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, (), ()
    ),
    ResourceType(
        "authorization.k8s.io", ("v1",), "subjectaccessreviews", "SubjectAccessReview", False, (), ()
    ),
    ResourceType(
        "authorization.k8s.io", ("v1",), "localsubjectaccessreviews", "LocalSubjectAccessReview", True, (), ()
    ),
    ResourceType("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass", False, ("pc",), ()),
    ResourceType(
        "topology.node.k8s.io",
        ("v1alpha2",),
        "noderesourcetopologies",
        "NodeResourceTopology",
        False,
        ("node-res-topo",),
        (),
    ),
    ResourceType(
        "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "resourceflavors", "ResourceFlavor", False, ("rf",), ()
    ),
    ResourceType("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "clusterqueues", "ClusterQueue", False, ("cq",)),
    ResourceType(
        "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "localqueues", "LocalQueue", True, ("queue", "queues", "lq")
    ),
    ResourceType("kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", "Workload", True, ("wl",)),
    ResourceType("scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True, ("pg", "pgs")),
    # Dynamic Resource Allocation (GA in 1.34); kubesim/dra.py validates and allocates.
    ResourceType("resource.k8s.io", ("v1",), "deviceclasses", "DeviceClass", False, (), ()),
    ResourceType("resource.k8s.io", ("v1",), "resourceslices", "ResourceSlice", False, (), ()),
    ResourceType("resource.k8s.io", ("v1",), "resourceclaims", "ResourceClaim", True, (), ("status",)),
    ResourceType("resource.k8s.io", ("v1",), "resourceclaimtemplates", "ResourceClaimTemplate", True, (), ()),
    # The NVIDIA DRA driver's ComputeDomain (a CRD); controllers/computedomain.py makes its channel
    # ResourceClaimTemplate and status (docs/topology.md).
    ResourceType("resource.nvidia.com", ("v1beta1",), "computedomains", "ComputeDomain", True, ("cd",)),
    # Kubernetes 1.35's gang API (GenericWorkload + GangScheduling gates): controllers/gangs.py.
    ResourceType("scheduling.k8s.io", ("v1alpha1",), "workloads", "Workload", True, (), ()),
    # Workload operators' CRDs (served only where the fleet file installs the operator: OPERATOR_GROUPS;
    # controllers in kubesim/controllers/{jobsets,pytorch,ray}.py)
    ResourceType("jobset.x-k8s.io", ("v1alpha2",), "jobsets", "JobSet", True, ("js",), ("status",), ("all",)),
    ResourceType("ray.io", ("v1",), "rayjobs", "RayJob", True, (), ("status",), ("all",)),
    ResourceType("ray.io", ("v1",), "rayclusters", "RayCluster", True, (), ("status",), ("all",)),
    ResourceType("kubeflow.org", ("v1",), "pytorchjobs", "PyTorchJob", True, (), ("status",), ("all",)),
    ResourceType("trainer.kubeflow.org", ("v1alpha1",), "trainjobs", "TrainJob", True, (), ("status",)),
    ResourceType(
        "trainer.kubeflow.org",
        ("v1alpha1",),
        "clustertrainingruntimes",
        "ClusterTrainingRuntime",
        False,
        (),
        (),
    ),
    ResourceType("trainer.kubeflow.org", ("v1alpha1",), "trainingruntimes", "TrainingRuntime", True, (), ()),
    # SIG-Multicluster Cluster Inventory API (a CRD): a kubesim cluster can be a fleet's hub.
    ResourceType(
        "multicluster.x-k8s.io", ("v1alpha1",), "clusterprofiles", "ClusterProfile", True, (), ("status",)
    ),
)

BY_KEY: dict[str, ResourceType] = {r.key: r for r in RESOURCES}
# The workload operators a fleet file may install per cluster (ClusterSpec.operators) and the API group
# each serves; a cluster without the operator does not serve the group (discovery, routes: 404).
OPERATOR_GROUPS: dict[str, str] = {
    "jobset": "jobset.x-k8s.io",
    "kuberay": "ray.io",
    "training-operator": "kubeflow.org",
    "trainer": "trainer.kubeflow.org",
}
# Resources that are only created (answered, never stored): the access reviews.
CREATE_ONLY = frozenset(
    {
        "selfsubjectaccessreviews.authorization.k8s.io",
        "selfsubjectreviews.authentication.k8s.io",
        "selfsubjectrulesreviews.authorization.k8s.io",
        "subjectaccessreviews.authorization.k8s.io",
        "localsubjectaccessreviews.authorization.k8s.io",
    }
)


def lookup(group: str, plural: str) -> ResourceType | None:
    """The resource served at /api(s)/<group>/<version>/<plural>, or None."""
    return BY_KEY.get(plural if not group else f"{plural}.{group}")


def groups() -> dict[str, tuple[str, ...]]:
    """Non-core API groups and their served versions, preferred first."""
    out: dict[str, tuple[str, ...]] = {}
    for r in RESOURCES:
        if r.group:  # a group's versions: the union over its resources (scheduling.k8s.io: v1, v1alpha1)
            out[r.group] = (*out.get(r.group, ()), *(v for v in r.versions if v not in out.get(r.group, ())))
    return out
