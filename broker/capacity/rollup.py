"""Capacity roll-up: NodeFacts -> ClusterSummary (what level 1 reads).

Owns which nodes take the broker's pods (readiness, cordon, tolerated taints), a node's placement
domains (the node, or each NUMA zone under single-numa-node), and the per-product histograms of free
GPUs, MIG slices and NUMA blocks. Pure: no I/O, no clock. Kubernetes objects become NodeFacts in
broker.capacity.kube_objects (the parsing side).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from broker.capacity import cliques as _cliques
from broker.core import catalog
from broker.core.k8s_names import (
    DRA_MIG_CLASS,
    GPU,
    GPU_TAINT_KEY,
    L_PRODUCT,
    OFFERED_BOTH,
    OFFERED_DEVICE_PLUGIN,
    OFFERED_DRA,
    SPOT_TAINT_KEYS,
    mig_resource,
)
from broker.core.model import (
    ClusterSnapshot,
    ClusterSummary,
    ClusterTraits,
    Health,
    MigCapacity,
    MigStrategy,
    NodeFacts,
    ProductCapacity,
    QueueHeadroom,
)
from broker.core.topology import CliqueCapacity

_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

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


def _kind_capacity(
    name: str, nodes: list[NodeFacts], tolerated: frozenset[str], *, dra: bool = False
) -> ProductCapacity | None:
    """Whole-GPU capacity of one product over the nodes of one allocation kind (None: no such node)."""
    if not nodes:
        return None
    total = allocatable = allocated = free = shared_alloc = shared_free = whole = 0
    frees: list[int] = []
    usable_nodes = 0
    blocks: list[int] = []
    split = 0  # most free GPUs on one single-numa-node node
    sizes: list[int] = []
    node_frees: list[int] = []
    cpu = mem = 0  # the most one usable node has allocatable
    gfd: set[str] = set()
    memory = nodes[0].product.memory_mib if nodes[0].product else 0
    for node in nodes:
        total += node.gpu_count
        whole += node.gpus_allocatable
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
        cpu = max(cpu, node.cpu_allocatable_millis)
        mem = max(mem, node.memory_allocatable_bytes >> 20)
        parent = gfd_parent(node)
        if parent:
            gfd.add(parent)
    return ProductCapacity(
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
        offered=OFFERED_DRA if dra else OFFERED_DEVICE_PLUGIN,
        dra=dra,
        whole_gpus=whole,
        max_node_cpu_millis=cpu,
        max_node_memory_mib=mem,
    )


def _first_memory(nodes: list[NodeFacts]) -> int:
    return nodes[0].product.memory_mib if nodes[0].product else 0


def offered_kinds(dp: ProductCapacity | None, dra: ProductCapacity | None) -> str:
    """How a product's whole GPUs are offered in a cluster: device-plugin, dra or both.

    A kind offers the product when its nodes have whole GPUs (usable now or not: a cordon does not change
    how the cluster serves the product); a product with no whole GPU at all (MIG only) is offered by the
    kind of its nodes.
    """
    kinds = [c for c in (dp, dra) if c is not None]
    with_gpus = [c for c in kinds if c.whole_gpus > 0] or kinds
    names = {c.offered for c in with_gpus}
    return OFFERED_BOTH if len(names) > 1 else names.pop()


def counted_kind(dp: ProductCapacity | None, dra: ProductCapacity | None, override: str) -> bool:
    """True when the product's free GPUs are DRA's alone (level 2 asks through claims for every job).

    The cluster's `gpuAllocation` (device-plugin | dra) decides when declared. Otherwise the kind that
    offers the product; offered both ways neither alone: each job is fitted to one kind (combine_kinds
    keeps both, the placement chooses per job), and this says DRA only when DRA has more whole GPUs or
    as many (the kind a placement recorded before placements carried their kind is read as).
    """
    if override in (OFFERED_DRA, OFFERED_DEVICE_PLUGIN):
        return override == OFFERED_DRA
    offered = offered_kinds(dp, dra)
    if offered != OFFERED_BOTH:
        return offered == OFFERED_DRA
    assert dp is not None and dra is not None
    return dra.whole_gpus >= dp.whole_gpus


def add_histograms(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Two histograms over disjoint nodes summed bucket by bucket."""
    if len(a) < len(b):
        a, b = b, a
    return tuple(n + (b[k] if k < len(b) else 0) for k, n in enumerate(a))


def _both(dp: ProductCapacity, dra: ProductCapacity, memory_mib: int) -> ProductCapacity:
    """A product served both ways: both kinds summed (the nodes are disjoint: the device plugin and the
    DRA driver never serve the same node's GPUs, so no GPU counts twice), each kind kept in `kinds`."""
    return ProductCapacity(
        product=dp.product,
        memory_mib=memory_mib,
        total=dp.total + dra.total,
        allocatable=dp.allocatable + dra.allocatable,
        allocated=dp.allocated + dra.allocated,
        free=dp.free + dra.free,
        nodes_by_free=add_histograms(dp.nodes_by_free, dra.nodes_by_free),
        numa_blocks=add_histograms(dp.numa_blocks, dra.numa_blocks),
        nodes=dp.nodes + dra.nodes,
        gfd_products=tuple(sorted({*dp.gfd_products, *dra.gfd_products})),
        shared_allocatable=dp.shared_allocatable + dra.shared_allocatable,
        shared_free=dp.shared_free + dra.shared_free,
        single_numa_node_free=max(dp.single_numa_node_free, dra.single_numa_node_free),
        domains_by_size=add_histograms(dp.domains_by_size, dra.domains_by_size),
        whole_nodes_by_free=add_histograms(dp.whole_nodes_by_free, dra.whole_nodes_by_free),
        offered=OFFERED_BOTH,
        dra=counted_kind(dp, dra, "auto"),
        whole_gpus=dp.whole_gpus + dra.whole_gpus,
        kinds=(replace(dp, memory_mib=memory_mib), replace(dra, memory_mib=memory_mib)),
    )


def rejoin_kinds(p: ProductCapacity, kinds: tuple[ProductCapacity, ...]) -> ProductCapacity:
    """A product served both ways, its kinds replaced (e.g. after reservations took from one)."""
    dp, dra = kinds
    return _both(dp, dra, p.memory_mib)


def combine_kinds(
    dp: ProductCapacity | None,
    dra: ProductCapacity | None,
    override: str = "auto",
    memory_mib: int | None = None,
) -> ProductCapacity:
    """One product's capacity as level 1 reads it.

    Served one way, or with a `gpuAllocation` override: the free GPUs and histograms of that kind,
    `total` and shared GPUs over both kinds. Served both ways: both kinds summed, each kept (`kinds`):
    a job fits the cluster when it fits one kind entirely (scheduler.placement builds one option per
    kind). `offered` says how the product is served."""
    first = dp if dp is not None else dra
    assert first is not None
    memory = first.memory_mib if memory_mib is None else memory_mib
    offered = offered_kinds(dp, dra)
    if (
        dp is not None
        and dra is not None
        and override not in (OFFERED_DRA, OFFERED_DEVICE_PLUGIN)
        and dp.whole_gpus > 0
        and dra.whole_gpus > 0
    ):
        return _both(dp, dra, memory)
    use_dra = counted_kind(dp, dra, override)
    counted = dra if use_dra else dp
    other = dp if use_dra else dra
    if counted is None:  # forced to a kind that does not serve the product: listed, nothing placeable
        assert other is not None
        counted = ProductCapacity(other.product, other.memory_mib, 0, 0, 0, 0, offered=offered)
    total = counted.total + (other.total if other is not None else 0)
    shared_alloc = counted.shared_allocatable + (other.shared_allocatable if other is not None else 0)
    shared_free = counted.shared_free + (other.shared_free if other is not None else 0)
    return replace(
        counted,
        memory_mib=memory,
        total=total,
        shared_allocatable=shared_alloc,
        shared_free=shared_free,
        offered=offered,
        dra=use_dra,
    )


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
    cliques: tuple[CliqueCapacity, ...] = (),
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
        cliques=cliques,
    )


def summarize(
    snapshot: ClusterSnapshot, traits: ClusterTraits, health: Health, heartbeat: float
) -> ClusterSummary:
    """The cluster's summary: per-product whole-GPU capacity with histograms, MIG capacity, Kueue headroom.

    Free capacity counts only nodes that take the broker's pods (ready, uncordoned, no untolerated
    taint); `total` counts every physical GPU. MIG free slices count settled nodes only.
    (broker.capacity.index.CapacityIndex keeps the same summary incrementally.)
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

    override = traits.gpu_allocation
    products = tuple(
        combine_kinds(
            _kind_capacity(name, [n for n in per_product[name] if not n.dra], tolerated),
            _kind_capacity(name, [n for n in per_product[name] if n.dra], tolerated, dra=True),
            override,
            _first_memory(per_product[name]),
        )
        for name in sorted(per_product)
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
        products=products,
        mig=mig,
        queues=snapshot.queues,
        nodes_total=len(snapshot.nodes),
        nodes_ready=ready,
        bad_nodes=len(snapshot.bad_nodes),
        cliques=_cliques.summarize_cliques((n, takes_whole_gpus(n, tolerated)) for n in snapshot.nodes),
    )
