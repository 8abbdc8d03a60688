"""Capacity from Kubernetes objects (plain dicts): Node, Pod, NodeResourceTopology, Kueue -> NodeFacts.

Owns what the broker believes a cluster can take: effective pod requests (reference 5), a node's whole
GPUs, MIG slices (none/single/mixed strategies), time-sliced GPUs and NUMA zones (reference 1, 2), Kueue
ClusterQueue headroom (reference 3). The roll-up into the per-product histograms level 1 reads is
broker.capacity.rollup. Pure: no I/O, no
clock. Unreadable objects raise MalformedObject naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.core import catalog
from broker.core.errors import MalformedObject
from broker.core.k8s_names import (
    DRA_MIG_CLASS,
    GPU,
    GPU_SHARED,
    GPU_TAINT_KEY,
    L_COUNT,
    L_FAMILY,
    L_MEMORY,
    L_MIG_STATE,
    L_MIG_STRATEGY,
    L_PRODUCT,
    L_REPLICAS,
    MIG_PREFIX,
    SPOT_TAINT_KEYS,
    profile_of_resource,
)
from broker.core.model import (
    GpuProduct,
    MigSlices,
    MigStrategy,
    NodeFacts,
    NumaZone,
    QueueHeadroom,
    Taint,
)
from broker.core.quantity import QuantityError, to_int, to_millis

__all__ = [
    "DRA_MIG_CLASS",
    "GPU",
    "GPU_SHARED",
    "GPU_TAINT_KEY",
    "SPOT_TAINT_KEYS",
    "NodeParts",
    "NodePartsCache",
    "facts_from_parts",
    "node_facts",
    "node_facts_from_requests",
    "node_parts",
    "pod_is_active",
    "pod_requests",
    "queue_headroom",
]

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


# --------------------------------------------------------------------------- helpers


def _name_of(obj: Mapping[str, Any], default: str = "<unnamed>") -> str:
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        name = meta.get("name")
        if isinstance(name, str) and name:
            return name
    return default


def _mapping(obj: Any, owner: str, field: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise MalformedObject(owner, field, f"expected an object, got {type(obj).__name__}")
    return obj


def _list(obj: Any, owner: str, field: str) -> Sequence[Any]:
    if obj is None:
        return ()
    if not isinstance(obj, list | tuple):
        raise MalformedObject(owner, field, f"expected a list, got {type(obj).__name__}")
    return obj


def _amount(resource: str, value: Any, owner: str, field: str) -> int:
    """A resource quantity in the broker's units: cpu in millicores, everything else whole units."""
    try:
        return to_millis(value) if resource == "cpu" else to_int(value)
    except QuantityError as exc:
        raise MalformedObject(owner, field, str(exc)) from exc


def _resources(obj: Any, owner: str, field: str) -> dict[str, int]:
    return {
        str(k): _amount(str(k), v, owner, f"{field}[{k}]") for k, v in _mapping(obj, owner, field).items()
    }


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max_into(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        if v > into.get(k, 0):
            into[k] = v


def _int_label(labels: Mapping[str, str], key: str, owner: str) -> int | None:
    raw = labels.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise MalformedObject(owner, f"metadata.labels[{key}]", f"not an integer: {raw!r}") from None
    if value < 0:
        raise MalformedObject(owner, f"metadata.labels[{key}]", f"negative: {raw!r}")
    return value


# --------------------------------------------------------------------------- pods


def _container_requests(container: Any, owner: str, field: str) -> dict[str, int]:
    """Requests of one container; a limit stands in for a missing request (API-server defaulting)."""
    c = _mapping(container, owner, field)
    res = _mapping(c.get("resources"), owner, f"{field}.resources")
    requests = _resources(res.get("requests"), owner, f"{field}.resources.requests")
    for k, v in _resources(res.get("limits"), owner, f"{field}.resources.limits").items():
        requests.setdefault(k, v)
    return requests


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests of a pod (reference 5, component-helpers PodRequests).

    Containers summed; restartable init containers (sidecars, restartPolicy Always) added to them; the
    max with each regular init container (plus the sidecars started before it); pod overhead added.
    Pod-level resources (spec.resources) replace the cpu/memory figures where set. Units: cpu in
    millicores, memory in bytes, extended resources as integers.
    """
    owner = _name_of(pod, "<pod>")
    spec = _mapping(pod.get("spec"), owner, "spec")
    total: dict[str, int] = {}
    for i, c in enumerate(_list(spec.get("containers"), owner, "spec.containers")):
        _add(total, _container_requests(c, owner, f"spec.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(_list(spec.get("initContainers"), owner, "spec.initContainers")):
        reqs = _container_requests(c, owner, f"spec.initContainers[{i}]")
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            _add(total, reqs)
            _add(sidecars, reqs)
            _max_into(init_peak, sidecars)
        else:
            during = dict(sidecars)
            _add(during, reqs)
            _max_into(init_peak, during)
    _max_into(total, init_peak)
    pod_level = _mapping(spec.get("resources"), owner, "spec.resources")
    if pod_level:
        level = _resources(pod_level.get("requests"), owner, "spec.resources.requests")
        for k, v in _resources(pod_level.get("limits"), owner, "spec.resources.limits").items():
            level.setdefault(k, v)
        for k in ("cpu", "memory"):
            if k in level:
                total[k] = level[k]
    _add(total, _resources(spec.get("overhead"), owner, "spec.overhead"))
    return total


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and not terminal. A pod being deleted still counts until it is terminal."""
    spec = pod.get("spec")
    status = pod.get("status")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return bool(node) and phase not in _TERMINAL_PHASES


# --------------------------------------------------------------------------- nodes


_DEPRECATED_POLICIES = (  # NRT v1alpha1 TopologyManagerPolicy prefixes -> kubelet policy names
    ("SingleNUMANode", "single-numa-node"),
    ("BestEffort", "best-effort"),
    ("Restricted", "restricted"),
    ("None", "none"),
)


def _topology_policy(nrt: Mapping[str, Any], owner: str) -> tuple[str, str]:
    """(policy, scope) from attributes, else the deprecated topologyPolicies[0]; defaults none/container."""
    policy: str | None = None
    scope: str | None = None
    for i, attr in enumerate(_list(nrt.get("attributes"), owner, "attributes")):
        a = _mapping(attr, owner, f"attributes[{i}]")
        if a.get("name") == "topologyManagerPolicy":
            policy = str(a.get("value", ""))
        elif a.get("name") == "topologyManagerScope":
            scope = str(a.get("value", ""))
    legacy = _list(nrt.get("topologyPolicies"), owner, "topologyPolicies")
    if legacy and (policy is None or scope is None):
        old = str(legacy[0])
        for prefix, name in _DEPRECATED_POLICIES:
            if old.startswith(prefix):
                policy = policy or name
                if old.endswith("PodLevel"):
                    scope = scope or "pod"
                break
    return policy or "none", scope or "container"


def _numa_zones(nrt: Mapping[str, Any], owner: str) -> tuple[NumaZone, ...]:
    zones = []
    for i, z in enumerate(_list(nrt.get("zones"), owner, "zones")):
        zone = _mapping(z, owner, f"zones[{i}]")
        if zone.get("type") != "Node":
            continue
        gpus_alloc, gpus_avail, cpu_avail = 0, 0, None
        for j, r in enumerate(_list(zone.get("resources"), owner, f"zones[{i}].resources")):
            res = _mapping(r, owner, f"zones[{i}].resources[{j}]")
            name = res.get("name")
            field = f"zones[{i}].resources[{j}]"
            if name == GPU:
                gpus_alloc = _amount(GPU, res.get("allocatable", 0), owner, f"{field}.allocatable")
                gpus_avail = _amount(GPU, res.get("available", 0), owner, f"{field}.available")
            elif name == "cpu" and "available" in res:
                cpu_avail = _amount("cpu", res["available"], owner, f"{field}.available")
        zones.append(NumaZone(str(zone.get("name", f"zone-{i}")), gpus_alloc, gpus_avail, cpu_avail))
    return tuple(zones)


def _taints(spec: Mapping[str, Any], owner: str) -> tuple[Taint, ...]:
    out = []
    for i, t in enumerate(_list(spec.get("taints"), owner, "spec.taints")):
        taint = _mapping(t, owner, f"spec.taints[{i}]")
        key, effect = taint.get("key"), taint.get("effect")
        if not isinstance(key, str) or not key:
            raise MalformedObject(owner, f"spec.taints[{i}].key", "missing")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise MalformedObject(owner, f"spec.taints[{i}].effect", f"unknown effect {effect!r}")
        out.append(Taint(key=key, effect=effect, value=str(taint.get("value") or "")))
    return tuple(out)


def _ready(status: Mapping[str, Any], owner: str) -> bool:
    for i, c in enumerate(_list(status.get("conditions"), owner, "status.conditions")):
        cond = _mapping(c, owner, f"status.conditions[{i}]")
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _labels(meta: Mapping[str, Any], owner: str) -> dict[str, str]:
    labels = _mapping(meta.get("labels"), owner, "metadata.labels")
    for k, v in labels.items():
        if not isinstance(v, str):
            raise MalformedObject(owner, f"metadata.labels[{k}]", f"label values are strings, got {v!r}")
    return dict(labels)


def node_facts(
    node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], nrt: Mapping[str, Any] | None
) -> NodeFacts:
    """NodeFacts of a node from its object, the active pods bound to it and its NodeResourceTopology."""
    allocated: dict[str, int] = {}
    for pod in pods:
        if pod_is_active(pod):
            _add(allocated, pod_requests(pod))
    return node_facts_from_requests(node, allocated, nrt)


@dataclass(frozen=True, slots=True)
class NodeParts:
    """What a node object and its NodeResourceTopology say, parsed once per version of either: a node's
    pods change far more often than the node, whose labels, quantities and NUMA zones were parsed again
    for every pod event."""

    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    base: dict[str, Any]  # the NodeFacts fields that do not depend on the pods


def node_parts(node: Mapping[str, Any], nrt: Mapping[str, Any] | None) -> NodeParts:
    """Parse the node object and its NRT (MalformedObject names the field that cannot be read)."""
    meta = _mapping(node.get("metadata"), "<node>", "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedObject("<node>", "metadata.name", "missing")
    spec = _mapping(node.get("spec"), name, "spec")
    status = _mapping(node.get("status"), name, "status")
    labels = _labels(meta, name)
    alloc = _resources(status.get("allocatable"), name, "status.allocatable")
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise MalformedObject(name, "spec.unschedulable", f"expected a boolean, got {unschedulable!r}")
    base: dict[str, Any] = {
        "name": name,
        "taints": _taints(spec, name),
        "labels": labels,
        "ready": _ready(status, name),
        "unschedulable": bool(unschedulable),
        "cpu_allocatable_millis": alloc.get("cpu", 0),
        "memory_allocatable_bytes": alloc.get("memory", 0),
    }
    if nrt:
        base["topology_policy"], base["topology_scope"] = _topology_policy(nrt, name)
        base["numa_zones"] = _numa_zones(nrt, name)
    return NodeParts(name, labels, alloc, base)


def facts_from_parts(parts: NodeParts, allocated: Mapping[str, int]) -> NodeFacts:
    """NodeFacts of a parsed node with the pre-summed effective requests of its active pods."""
    return NodeFacts(
        **parts.base,
        cpu_allocated_millis=allocated.get("cpu", 0),
        memory_allocated_bytes=allocated.get("memory", 0),
        **_gpu_facts(parts.name, parts.labels, parts.allocatable, allocated),
    )


def node_facts_from_requests(
    node: Mapping[str, Any], allocated: Mapping[str, int], nrt: Mapping[str, Any] | None
) -> NodeFacts:
    """NodeFacts from the node object and the pre-summed effective requests of its active pods."""
    return facts_from_parts(node_parts(node, nrt), allocated)


class NodePartsCache:
    """Each node's parts, kept while the watcher holds the same node and NRT objects (an event replaces
    the object, so identity says whether it changed). Not thread-safe: its watcher's lock guards it."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None, NodeParts]] = {}

    def facts(
        self, name: str, node: Mapping[str, Any], allocated: Mapping[str, int], nrt: Mapping[str, Any] | None
    ) -> NodeFacts:
        """NodeFacts of the node `name` (the watcher's key for `node`)."""
        held = self._parts.get(name)
        if held is None or held[0] is not node or held[1] is not nrt:
            held = (node, nrt, node_parts(node, nrt))
            self._parts[name] = held
        return facts_from_parts(held[2], allocated)

    def forget(self, name: str) -> None:
        self._parts.pop(name, None)


def _gpu_facts(
    name: str, labels: Mapping[str, str], alloc: Mapping[str, int], allocated: Mapping[str, int]
) -> dict[str, Any]:
    product_label = labels.get(L_PRODUCT)
    mig_resources = sorted(r for r in alloc if r.startswith(MIG_PREFIX))
    has_gpu_resource = GPU in alloc or GPU_SHARED in alloc or bool(mig_resources)
    if product_label is None and not has_gpu_resource:
        return {"product": None}
    count = _int_label(labels, L_COUNT, name)
    memory = _int_label(labels, L_MEMORY, name)
    replicas = _int_label(labels, L_REPLICAS, name)
    strategy_label = labels.get(L_MIG_STRATEGY)
    try:
        strategy = MigStrategy(strategy_label) if strategy_label else MigStrategy.NONE
    except ValueError:
        raise MalformedObject(
            name, f"metadata.labels[{L_MIG_STRATEGY}]", f"expected single or mixed, got {strategy_label!r}"
        ) from None
    state = labels.get(L_MIG_STATE)
    settled = state is None or state == "success"
    parent, slice_profile, shared_suffix = catalog.split_product_label(product_label or "")
    gpus = alloc.get(GPU, 0)
    gpus_used = allocated.get(GPU, 0)
    out: dict[str, Any] = {"mig_settled": settled}

    if slice_profile is not None:
        # MIG single strategy: the gpu.* labels describe the MIG device; nvidia.com/gpu counts slices.
        product = catalog.normalise_product(parent)
        out["product"] = product
        out["mig_strategy"] = MigStrategy.SINGLE
        if slice_profile == "INVALID":
            out["mig_settled"] = False
            out["gpu_count"] = 0
            return out
        try:
            catalog.parse_profile(slice_profile)
        except ValueError as exc:
            raise MalformedObject(name, f"metadata.labels[{L_PRODUCT}]", str(exc)) from None
        profile = catalog.mig_profile(product.name, slice_profile)
        per_gpu = profile.max_per_gpu if profile else 1
        out["gpu_count"] = -(-gpus // per_gpu) if gpus else 0
        out["mig"] = (MigSlices(slice_profile, gpus, gpus_used),)
        return out

    product = (
        catalog.normalise_product(product_label, memory)
        if product_label
        else GpuProduct(name="unknown", memory_mib=memory or 0, known=False)
    )
    if not product.family and labels.get(L_FAMILY):
        product = GpuProduct(product.name, product.memory_mib, labels[L_FAMILY], product.known)
    out["product"] = product
    out["gpu_count"] = count if count is not None else gpus
    if mig_resources:
        strategy = MigStrategy.MIXED
        out["mig"] = tuple(
            MigSlices(profile_of_resource(r), alloc[r], allocated.get(r, 0)) for r in mig_resources
        )
    out["mig_strategy"] = strategy
    time_sliced = shared_suffix or (replicas is not None and replicas > 1)
    if time_sliced or GPU_SHARED in alloc:
        out["shared_replicas"] = max(replicas or 1, 1)
    if time_sliced:
        out["shared_allocatable"] = gpus + alloc.get(GPU_SHARED, 0)
        out["shared_allocated"] = gpus_used + allocated.get(GPU_SHARED, 0)
        return out
    out["gpus_allocatable"] = gpus
    out["gpus_allocated"] = gpus_used
    if GPU_SHARED in alloc:
        out["shared_allocatable"] = alloc[GPU_SHARED]
        out["shared_allocated"] = allocated.get(GPU_SHARED, 0)
    return out


# --------------------------------------------------------------------------- Kueue


def queue_headroom(cluster_queue: Mapping[str, Any]) -> tuple[QueueHeadroom, ...]:
    """Quota and usage per (flavor, resource) of a Kueue ClusterQueue, v1beta1 or v1beta2 shape.

    Usage is the reserved quota (status.flavorsReservation), else admitted usage (flavorsUsage).
    """
    owner = _name_of(cluster_queue, "<clusterqueue>")
    spec = _mapping(cluster_queue.get("spec"), owner, "spec")
    status = _mapping(cluster_queue.get("status"), owner, "status")
    used: dict[tuple[str, str], int] = {}
    source = "flavorsReservation" if status.get("flavorsReservation") else "flavorsUsage"
    for i, f in enumerate(_list(status.get(source), owner, f"status.{source}")):
        flavor = _mapping(f, owner, f"status.{source}[{i}]")
        for j, r in enumerate(_list(flavor.get("resources"), owner, f"status.{source}[{i}].resources")):
            res = _mapping(r, owner, f"status.{source}[{i}].resources[{j}]")
            rname = str(res.get("name", ""))
            field = f"status.{source}[{i}].resources[{j}].total"
            used[(str(flavor.get("name", "")), rname)] = _amount(rname, res.get("total", 0), owner, field)
    out = []
    for g, group in enumerate(_list(spec.get("resourceGroups"), owner, "spec.resourceGroups")):
        grp = _mapping(group, owner, f"spec.resourceGroups[{g}]")
        for i, f in enumerate(_list(grp.get("flavors"), owner, f"spec.resourceGroups[{g}].flavors")):
            path = f"spec.resourceGroups[{g}].flavors[{i}]"
            flavor = _mapping(f, owner, path)
            fname = str(flavor.get("name", ""))
            for j, r in enumerate(_list(flavor.get("resources"), owner, f"{path}.resources")):
                res = _mapping(r, owner, f"{path}.resources[{j}]")
                raw_name = res.get("name")
                if not isinstance(raw_name, str) or not raw_name:
                    raise MalformedObject(owner, f"{path}.resources[{j}].name", "missing")
                rname = raw_name
                rpath = f"{path}.resources[{j}]"
                nominal = _amount(rname, res.get("nominalQuota", 0), owner, f"{rpath}.nominalQuota")
                limit = res.get("borrowingLimit")
                borrowing = None if limit is None else _amount(rname, limit, owner, f"{rpath}.borrowingLimit")
                out.append(
                    QueueHeadroom(owner, fname, rname, nominal, used.get((fname, rname), 0), borrowing)
                )
    return tuple(out)
