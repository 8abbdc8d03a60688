"""Which pending pods the simulated scheduler must place together, and what the group needs.

Owns `unit_of(pod)` and `UnitNeeds`: the scheduling units above the single pod that are not
coscheduling PodGroups (those stay in scheduler.py):

- Kubernetes 1.35's gang API (KEP-4671, `scheduling.k8s.io/v1alpha1` Workload, feature gates
  GenericWorkload + GangScheduling): a pod with `spec.workloadRef {name, podGroup, podGroupReplicaKey}`
  belongs to that pod group of the Workload; a group whose policy is `gang: {minCount}` is bound all
  together (at least minCount pods) or not at all. The waiting messages are kube-scheduler's
  GangScheduling plugin's ("waiting for minCount pods from a gang to appear in scheduling queue", ...).
  A `basic` policy is no gang: its pods are scheduled one by one.
- the NVIDIA DRA driver's ComputeDomain (`resource.nvidia.com/v1beta1`): a pod claiming the domain's
  channel (a `resourceClaimTemplateName` equal to the domain's `spec.channel.resourceClaimTemplate.name`)
  belongs to the domain; kubesim allocates the channel claims of a domain only when all its pods
  (`spec.numNodes`, at least 1) are placed inside one NVLink clique (the node label
  `nvidia.com/gpu.clique`), so the scheduler places the domain's pods as one unit restricted to one
  clique (docs/topology.md says where this is stricter than the real driver).

A pod in both (the broker writes both on a member that serves both) is one unit: the Workload's gang
and the domain's clique. Pure reads of the store; the scheduler does the placing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesim.controllers.pods import is_terminal
from kubesim.store import Obj, ObjectStore

__all__ = [
    "CLIQUE_LABEL",
    "COMPUTE_DOMAINS",
    "WORKLOADS",
    "UnitKey",
    "UnitNeeds",
    "domain_of",
    "members",
    "needs",
    "unit_of",
]

WORKLOADS = "workloads.scheduling.k8s.io"
COMPUTE_DOMAINS = "computedomains.resource.nvidia.com"
CLIQUE_LABEL = "nvidia.com/gpu.clique"


@dataclass(frozen=True, slots=True, order=True)
class UnitKey:
    namespace: str
    workload: str = ""  # the Workload named by spec.workloadRef ("" when none)
    pod_group: str = ""
    replica: str = ""  # podGroupReplicaKey
    domain: str = ""  # the ComputeDomain whose channel the pod claims ("" when none)


@dataclass(frozen=True, slots=True)
class UnitNeeds:
    """What the unit's pods need together: `waiting` (non-empty) holds them all with that message."""

    min_count: int = 1  # pods bound together at least (bound members count)
    one_clique: bool = False  # every member (bound or not) on nodes of one NVLink clique
    all_pending: bool = False  # every pending member placed, or none (a ComputeDomain's pods)
    waiting: str = ""


def _workload_ref(pod: Obj) -> Obj | None:
    ref = (pod.get("spec") or {}).get("workloadRef")
    return ref if isinstance(ref, dict) and ref.get("name") else None


def domain_of(store: ObjectStore, pod: Obj) -> Obj | None:
    """The ComputeDomain whose channel ResourceClaimTemplate the pod claims, if any."""
    refs = [
        r.get("resourceClaimTemplateName")
        for r in (pod.get("spec") or {}).get("resourceClaims") or ()
        if isinstance(r, dict) and r.get("resourceClaimTemplateName")
    ]
    if not refs:
        return None
    ns = pod["metadata"].get("namespace", "")
    for cd in store.list(COMPUTE_DOMAINS, ns)[0]:
        channel = ((cd.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}
        if channel.get("name") in refs and not cd["metadata"].get("deletionTimestamp"):
            return cd
    return None


def unit_of(store: ObjectStore, pod: Obj) -> UnitKey | None:
    """The unit the pod is scheduled in, None for a pod scheduled on its own."""
    ns = pod["metadata"].get("namespace", "")
    ref = _workload_ref(pod)
    cd = domain_of(store, pod)
    if ref is None and cd is None:
        return None
    return UnitKey(
        ns,
        str(ref.get("name", "")) if ref else "",
        str(ref.get("podGroup", "")) if ref else "",
        str(ref.get("podGroupReplicaKey", "") or "") if ref else "",
        cd["metadata"]["name"] if cd is not None else "",
    )


def _same_unit(store: ObjectStore, key: UnitKey, pod: Obj) -> bool:
    if key.workload:
        ref = _workload_ref(pod) or {}
        return (
            ref.get("name") == key.workload
            and ref.get("podGroup", "") == key.pod_group
            and str(ref.get("podGroupReplicaKey", "") or "") == key.replica
        )
    cd = domain_of(store, pod)
    return cd is not None and cd["metadata"]["name"] == key.domain


def members(store: ObjectStore, key: UnitKey) -> list[Obj]:
    """The unit's live pods (bound or not; not terminal, not being deleted)."""
    return [
        p
        for p in store.list("pods", key.namespace)[0]
        if not is_terminal(p) and not p["metadata"].get("deletionTimestamp") and _same_unit(store, key, p)
    ]


def needs(store: ObjectStore, key: UnitKey, pending: int, bound: int) -> UnitNeeds:
    """The unit's requirements, or why its pods wait before any node is tried."""
    min_count, one_clique, all_pending = 1, False, False
    if key.workload:
        wl = store.find(WORKLOADS, key.namespace, key.workload)
        if wl is None:
            return UnitNeeds(
                waiting=f'waiting for pods\'s workload "{key.workload}" to appear in scheduling queue'
            )
        group = next(
            (g for g in (wl.get("spec") or {}).get("podGroups") or () if g.get("name") == key.pod_group), None
        )
        if group is None:
            return UnitNeeds(
                waiting=f'pod group "{key.pod_group}" doesn\'t exist for a workload "{key.workload}"'
            )
        gang = (group.get("policy") or {}).get("gang")
        if isinstance(gang, dict):
            min_count = max(int(gang.get("minCount") or 1), 1)
            if bound + pending < min_count:
                return UnitNeeds(
                    waiting="waiting for minCount pods from a gang to appear in scheduling queue"
                )
    if key.domain:
        cd = store.find(COMPUTE_DOMAINS, key.namespace, key.domain)
        num = max(int(((cd or {}).get("spec") or {}).get("numNodes") or 1), 1)
        one_clique, all_pending = True, True
        if bound + pending < num:
            return UnitNeeds(
                waiting=f"computedomain {key.namespace}/{key.domain}: {bound + pending} of its {num} pods "
                "exist; its channel is allocated once all of them can be placed in one NVLink clique"
            )
        min_count = max(min_count, num)
    return UnitNeeds(min_count, one_clique, all_pending)
