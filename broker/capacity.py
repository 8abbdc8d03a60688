"""Capacity: Kubernetes objects (plain dicts) -> NodeFacts -> ClusterSnapshot -> ClusterSummary.

Owns what the broker believes a cluster can take: effective pod requests (reference 5), a node's whole
GPUs, MIG slices (none/single/mixed strategies), time-sliced GPUs and NUMA zones (reference 1, 2), Kueue
ClusterQueue headroom (reference 3), and the per-product histograms level 1 reads. Pure: no I/O, no
clock. Unreadable objects raise MalformedObject naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker import catalog
from broker.errors import MalformedObject
from broker.model import (
    ClusterSnapshot,
    ClusterSummary,
    ClusterTraits,
    GpuProduct,
    Health,
    MigCapacity,
    MigSlices,
    MigStrategy,
    NodeFacts,
    NumaZone,
    ProductCapacity,
    QueueHeadroom,
    Taint,
)
from broker.quantity import QuantityError, to_int, to_millis
from broker.vocabulary import (
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
    mig_resource,
    profile_of_resource,
)

__all__ = [
    "DRA_MIG_CLASS",
    "GPU",
    "GPU_SHARED",
    "GPU_TAINT_KEY",
    "SPOT_TAINT_KEYS",
    "accepts_broker_pods",
    "cluster_summary",
    "gfd_parent",
    "gpu_domains",
    "histogram",
    "mig_resource_name",
    "node_facts",
    "node_facts_from_requests",
    "numa_block",
    "pod_is_active",
    "pod_requests",
    "queue_headroom",
    "summarize",
    "takes_whole_gpus",
    "tolerated_taint_keys",
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


def node_facts_from_requests(
    node: Mapping[str, Any], allocated: Mapping[str, int], nrt: Mapping[str, Any] | None
) -> NodeFacts:
    """NodeFacts from the node object and the pre-summed effective requests of its active pods."""
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
        "cpu_allocated_millis": allocated.get("cpu", 0),
        "memory_allocatable_bytes": alloc.get("memory", 0),
        "memory_allocated_bytes": allocated.get("memory", 0),
    }
    if nrt:
        base["topology_policy"], base["topology_scope"] = _topology_policy(nrt, name)
        base["numa_zones"] = _numa_zones(nrt, name)
    gpu_facts = _gpu_facts(name, labels, alloc, allocated)
    return NodeFacts(**base, **gpu_facts)


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


# --------------------------------------------------------------------------- summary


def tolerated_taint_keys(spot: bool) -> frozenset[str]:
    """Taint keys the broker's workloads tolerate in a cluster (level 2 writes these tolerations)."""
    return frozenset((GPU_TAINT_KEY, *SPOT_TAINT_KEYS)) if spot else frozenset((GPU_TAINT_KEY,))


def accepts_broker_pods(node: NodeFacts, tolerated: frozenset[str]) -> bool:
    """Ready, not cordoned, and no NoSchedule/NoExecute taint the broker's workloads don't tolerate."""
    if not node.schedulable:
        return False
    return all(t.effect not in _BLOCKING_EFFECTS or t.key in tolerated for t in node.taints)


def gpu_domains(node: NodeFacts) -> tuple[int, ...]:
    """Free whole GPUs of each placement domain of a node (what nodes_by_free counts).

    A domain is the node, or under topology policy single-numa-node each NUMA zone: the kubelet's
    topology manager refuses a pod whose GPUs can't come from one zone (TopologyAffinityError).
    """
    node_free = node.gpus_free
    if node.topology_policy == "single-numa-node" and node.numa_zones:
        return tuple(min(z.gpus_available, node_free) for z in node.numa_zones)
    return (node_free,)


def gpu_domain_sizes(node: NodeFacts) -> tuple[int, ...]:
    """Allocatable whole GPUs of each placement domain of a node (the domains gpu_domains counts)."""
    if node.topology_policy == "single-numa-node" and node.numa_zones:
        return tuple(min(z.gpus_allocatable, node.gpus_allocatable) for z in node.numa_zones)
    return (node.gpus_allocatable,)


def single_numa_node_free(node: NodeFacts) -> int:
    """The node's free GPUs when its topology policy is single-numa-node (zones summed), else 0."""
    if node.topology_policy == "single-numa-node" and node.numa_zones:
        return node.gpus_free
    return 0


def numa_block(node: NodeFacts) -> int:
    """The largest free GPU block inside one NUMA zone of a node, bounded by its free GPUs."""
    return min(node.largest_numa_gpu_block, node.gpus_free)


def takes_whole_gpus(node: NodeFacts, tolerated: frozenset[str]) -> bool:
    """The node counts towards free whole GPUs: it has some and takes the broker's pods."""
    return node.gpus_allocatable > 0 and accepts_broker_pods(node, tolerated)


def gfd_parent(node: NodeFacts) -> str | None:
    """The parent gpu.product label value of a node (no -MIG-/-SHARED suffix), None without the label."""
    label = node.labels.get(L_PRODUCT)
    return catalog.split_product_label(label)[0] if label else None


def mig_resource_name(node: NodeFacts, profile: str) -> str:
    """The extended resource a pod asks for to get one slice of `profile` on this node; on a DRA node the
    DeviceClass `mig.nvidia.com` (level 2 writes a ResourceClaimTemplate for it)."""
    if node.dra:
        return DRA_MIG_CLASS
    if node.mig_strategy is MigStrategy.SINGLE:
        return GPU
    return mig_resource(profile)


def histogram(counts: Mapping[int, int]) -> tuple[int, ...]:
    """(count of 0, count of 1, ..., count of the largest value with a non-zero count)."""
    top = max((v for v, n in counts.items() if n), default=-1)
    return tuple(counts.get(k, 0) for k in range(top + 1))


def _histogram(values: Iterable[int]) -> tuple[int, ...]:
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return histogram(counts)


def cluster_summary(
    cluster: str,
    traits: ClusterTraits,
    health: Health,
    heartbeat: float,
    *,
    products: tuple[ProductCapacity, ...],
    mig: tuple[MigCapacity, ...],
    queues: tuple[QueueHeadroom, ...],
    nodes_total: int,
    nodes_ready: int,
    bad_nodes: int,
) -> ClusterSummary:
    """A ClusterSummary from its aggregates and the operator's declared traits."""
    return ClusterSummary(
        cluster=cluster,
        tier=traits.tier,
        region=traits.region,
        health=health,
        heartbeat=heartbeat,
        products=products,
        mig=mig,
        queues=queues,
        price_per_gpu_hour=dict(traits.price_per_gpu_hour),
        nodes_total=nodes_total,
        nodes_ready=nodes_ready,
        bad_nodes=bad_nodes,
        labels=dict(traits.labels),
    )


def summarize(
    snapshot: ClusterSnapshot, traits: ClusterTraits, health: Health, heartbeat: float
) -> ClusterSummary:
    """The cluster's summary: per-product whole-GPU capacity with histograms, MIG capacity, Kueue headroom.

    Free capacity counts only nodes that take the broker's pods (ready, uncordoned, no untolerated
    taint); `total` counts every physical GPU. MIG free slices count settled nodes only.
    (broker.capacity_index.CapacityIndex keeps the same summary incrementally.)
    """
    tolerated = tolerated_taint_keys(traits.spot)
    per_product: dict[str, list[NodeFacts]] = {}
    mig_acc: dict[tuple[str, str, str], list[int]] = {}  # [allocatable, free, largest, unsettled]
    mig_gfd: dict[tuple[str, str, str], set[str]] = {}
    ready = 0
    for node in snapshot.nodes:
        if node.ready:
            ready += 1
        if node.product is None:
            continue
        per_product.setdefault(node.product.name, []).append(node)
        if not node.mig:
            continue
        usable = accepts_broker_pods(node, tolerated)
        parent = gfd_parent(node)
        for s in node.mig:
            key = (node.product.name, s.profile, mig_resource_name(node, s.profile))
            acc = mig_acc.setdefault(key, [0, 0, 0, 0])
            acc[0] += s.allocatable
            if not node.mig_settled:
                acc[3] += 1
            elif usable:
                acc[1] += s.free
                acc[2] = max(acc[2], s.free)
            if parent:
                mig_gfd.setdefault(key, set()).add(parent)

    products = []
    for name in sorted(per_product):
        nodes = per_product[name]
        total = allocatable = allocated = free = shared_alloc = shared_free = 0
        frees: list[int] = []
        usable_nodes = 0
        blocks: list[int] = []
        split = 0  # most free GPUs on one single-numa-node node
        sizes: list[int] = []
        node_frees: list[int] = []
        gfd: set[str] = set()
        memory = nodes[0].product.memory_mib if nodes[0].product else 0
        for node in nodes:
            total += node.gpu_count
            if node.shared_allocatable and accepts_broker_pods(node, tolerated):
                shared_alloc += node.shared_allocatable
                shared_free += max(0, node.shared_allocatable - node.shared_allocated)
            if not takes_whole_gpus(node, tolerated):
                continue
            allocatable += node.gpus_allocatable
            allocated += node.gpus_allocated
            free += node.gpus_free
            usable_nodes += 1
            frees.extend(gpu_domains(node))
            blocks.append(numa_block(node))
            split = max(split, single_numa_node_free(node))
            sizes.extend(gpu_domain_sizes(node))
            node_frees.append(node.gpus_free)
            parent = gfd_parent(node)
            if parent:
                gfd.add(parent)
        products.append(
            ProductCapacity(
                product=name,
                memory_mib=memory,
                total=total,
                allocatable=allocatable,
                allocated=allocated,
                free=free,
                nodes_by_free=_histogram(frees),
                numa_blocks=_histogram(blocks),
                nodes=usable_nodes,
                gfd_products=tuple(sorted(gfd)),
                shared_allocatable=shared_alloc,
                shared_free=shared_free,
                single_numa_node_free=split,
                domains_by_size=_histogram(sizes),
                whole_nodes_by_free=_histogram(node_frees),
            )
        )
    mig = tuple(
        MigCapacity(
            product=product,
            profile=profile,
            resource_name=resource,
            allocatable=acc[0],
            free=acc[1],
            largest_free_on_node=acc[2],
            settled=acc[3] == 0,
            gfd_products=tuple(sorted(mig_gfd.get((product, profile, resource), ()))),
        )
        for (product, profile, resource), acc in sorted(mig_acc.items())
    )
    return cluster_summary(
        snapshot.cluster,
        traits,
        health,
        heartbeat,
        products=tuple(products),
        mig=mig,
        queues=snapshot.queues,
        nodes_total=len(snapshot.nodes),
        nodes_ready=ready,
        bad_nodes=len(snapshot.bad_nodes),
    )
