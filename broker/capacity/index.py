"""CapacityIndex: one cluster's ClusterSummary kept incrementally, node by node.

Owns the running aggregates behind a ClusterSummary so that a change to one node costs O(that node) and a
summary costs O(products x histogram width), not O(nodes). Per GPU product it keeps totals, the counts
behind the nodes_by_free and numa_blocks histograms and a counter of gpu.product label values; per MIG
(product, profile, resource) the slice totals, a count per free value (the largest free slices on one
node is the largest value with a non-zero count) and a counter of label values; per NVLink clique its
free-GPU histogram (broker.capacity.cliques). `upsert` subtracts the
node's old contribution and adds its new one.

The result is exactly `rollup.summarize` of the same nodes (sorted by name, as ClusterWatcher builds
snapshots): the per-node rules (placement domains under single-numa-node, taint tolerance, MIG resource
names, label parents) are capacity.py's functions, called here and by summarize alike.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from broker.capacity import rollup
from broker.capacity.cliques import CliqueIndex, CliquePart, clique_part
from broker.core.k8s_names import OFFERED_DEVICE_PLUGIN, OFFERED_DRA
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    MigCapacity,
    NodeFacts,
    ProductCapacity,
    QueueHeadroom,
)

__all__ = ["CapacityIndex"]

MigKey = tuple[str, str, str]  # (product, profile, resource name)
K = TypeVar("K")


def _bump(counts: dict[K, int], key: K, delta: int) -> None:
    """counts[key] += delta, forgetting keys that reach zero (so a max over keys stays meaningful)."""
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        del counts[key]


@dataclass(frozen=True, slots=True)
class _MigPart:
    """One MIG slice line of a node: what it adds to its (product, profile, resource) aggregate."""

    key: MigKey
    allocatable: int
    unsettled: bool
    free: int | None  # None: not counted as free (node unsettled or not taking the broker's pods)
    gfd: str | None


@dataclass(frozen=True, slots=True)
class _Contribution:
    """What one node adds to the cluster's aggregates."""

    ready: bool
    product: str | None
    memory_mib: int
    gpu_count: int
    usable: bool  # counts towards free whole GPUs (rollup.takes_whole_gpus)
    allocatable: int
    allocated: int
    free: int
    domains: tuple[int, ...]
    block: int
    gfd: str | None
    mig: tuple[_MigPart, ...]
    shared_allocatable: int = 0  # time-sliced replicas, when the node takes the broker's pods
    shared_free: int = 0
    split: int = 0  # capacity.single_numa_node_free
    sizes: tuple[int, ...] = ()  # capacity.gpu_domain_sizes
    clique: CliquePart | None = None  # its NVLink clique's part (broker.capacity.cliques)
    dra: bool = False  # the node's GPUs come from DRA ResourceSlices
    whole: int = 0  # whole GPUs allocatable, usable or not (how the product is offered)
    node_cpu_millis: int = 0  # allocatable on the node (counted for usable ones only)
    node_memory_mib: int = 0


def _contribution(node: NodeFacts, tolerated: frozenset[str]) -> _Contribution:
    if node.product is None:
        return _Contribution(node.ready, None, 0, 0, False, 0, 0, 0, (), 0, None, (), dra=node.dra)
    shared = node.shared_allocatable if rollup.accepts_broker_pods(node, tolerated) else 0
    shared_free = max(0, shared - node.shared_allocated) if shared else 0
    parent = rollup.gfd_parent(node)
    mig: tuple[_MigPart, ...] = ()
    if node.mig:
        takes_pods = rollup.accepts_broker_pods(node, tolerated)
        mig = tuple(
            _MigPart(
                key=(node.product.name, s.profile, rollup.mig_resource_name(node, s.profile)),
                allocatable=s.allocatable,
                unsettled=not node.mig_settled,
                free=s.free if node.mig_settled and takes_pods else None,
                gfd=parent,
            )
            for s in node.mig
        )
    if not rollup.takes_whole_gpus(node, tolerated):
        return _Contribution(
            node.ready,
            node.product.name,
            node.product.memory_mib,
            node.gpu_count,
            False,
            0,
            0,
            0,
            (),
            0,
            None,
            mig,
            shared,
            shared_free,
            dra=node.dra,
            whole=node.gpus_allocatable,
        )
    return _Contribution(
        ready=node.ready,
        product=node.product.name,
        memory_mib=node.product.memory_mib,
        gpu_count=node.gpu_count,
        usable=True,
        allocatable=node.gpus_allocatable,
        allocated=node.gpus_allocated,
        free=node.gpus_free,
        domains=rollup.gpu_domains(node),
        block=rollup.numa_block(node),
        gfd=parent,
        mig=mig,
        shared_allocatable=shared,
        shared_free=shared_free,
        split=rollup.single_numa_node_free(node),
        sizes=rollup.gpu_domain_sizes(node),
        clique=clique_part(node, usable=True),
        dra=node.dra,
        whole=node.gpus_allocatable,
        node_cpu_millis=node.cpu_allocatable_millis,
        node_memory_mib=node.memory_allocatable_bytes >> 20,
    )


@dataclass
class _ProductAgg:
    nodes: int = 0  # nodes of this product, usable or not (the product is listed while any exist)
    memory: dict[int, int] = field(default_factory=dict)  # memory_mib -> nodes
    total: int = 0
    allocatable: int = 0
    allocated: int = 0
    free: int = 0
    usable_nodes: int = 0
    domains: dict[int, int] = field(default_factory=dict)  # free GPUs of a domain -> domains
    blocks: dict[int, int] = field(default_factory=dict)  # largest NUMA block -> nodes
    gfd: dict[str, int] = field(default_factory=dict)  # label parent -> usable nodes
    shared_allocatable: int = 0
    shared_free: int = 0
    splits: dict[int, int] = field(default_factory=dict)  # free GPUs of a single-numa-node node -> nodes
    sizes: dict[int, int] = field(default_factory=dict)  # allocatable GPUs of a domain -> domains
    node_free: dict[int, int] = field(default_factory=dict)  # free GPUs of a node -> nodes
    whole: int = 0
    cpus: dict[int, int] = field(default_factory=dict)  # allocatable CPU millis of a usable node -> nodes
    mems: dict[int, int] = field(default_factory=dict)  # allocatable memory MiB of a usable node -> nodes

    def add(self, c: _Contribution, sign: int) -> None:
        self.nodes += sign
        self.whole += sign * c.whole
        _bump(self.memory, c.memory_mib, sign)
        self.total += sign * c.gpu_count
        self.shared_allocatable += sign * c.shared_allocatable
        self.shared_free += sign * c.shared_free
        if not c.usable:
            return
        self.allocatable += sign * c.allocatable
        self.allocated += sign * c.allocated
        self.free += sign * c.free
        self.usable_nodes += sign
        for d in c.domains:
            _bump(self.domains, d, sign)
        _bump(self.blocks, c.block, sign)
        if c.split:
            _bump(self.splits, c.split, sign)
        for k in c.sizes:
            _bump(self.sizes, k, sign)
        _bump(self.node_free, c.free, sign)
        _bump(self.cpus, c.node_cpu_millis, sign)
        _bump(self.mems, c.node_memory_mib, sign)
        if c.gfd:
            _bump(self.gfd, c.gfd, sign)


@dataclass
class _MigAgg:
    parts: int = 0  # node slice lines with this key (the key is listed while any exist)
    allocatable: int = 0
    free: int = 0
    frees: dict[int, int] = field(default_factory=dict)  # free slices on a node -> nodes
    unsettled: int = 0
    gfd: dict[str, int] = field(default_factory=dict)

    def add(self, p: _MigPart, sign: int) -> None:
        self.parts += sign
        self.allocatable += sign * p.allocatable
        if p.unsettled:
            self.unsettled += sign
        elif p.free is not None:
            self.free += sign * p.free
            _bump(self.frees, p.free, sign)
        if p.gfd:
            _bump(self.gfd, p.gfd, sign)


class CapacityIndex:
    """One cluster's nodes and the running aggregates of its ClusterSummary.

    upsert(facts)   a node appeared or changed (clears a bad mark of the same name)
    remove(name)    a node is gone (also from the bad nodes)
    mark_bad(name)  a node's object could not be parsed: it leaves the aggregates and counts as bad
    summary(...)    the ClusterSummary, equal to rollup.summarize over the same nodes sorted by name

    Taint tolerance depends on whether the cluster is declared spot; the index is built for `spot` and
    re-aggregates once (O(nodes)) if summary() is asked with traits of the other kind.
    """

    def __init__(self, cluster: str, *, spot: bool = False) -> None:
        self.cluster = cluster
        self._reset(spot)

    def _reset(self, spot: bool) -> None:
        self._spot = spot
        self._tolerated = rollup.tolerated_taint_keys(spot)
        self._facts: dict[str, NodeFacts] = {}
        self._parts: dict[str, _Contribution] = {}
        self._bad: set[str] = set()
        self._ready = 0
        self._products: dict[tuple[str, bool], _ProductAgg] = {}  # (product, DRA nodes) -> aggregates
        self._mig: dict[MigKey, _MigAgg] = {}
        self._cliques = CliqueIndex()

    # ------------------------------------------------------------------ changes

    def upsert(self, facts: NodeFacts) -> None:
        self._drop(facts.name)
        self._bad.discard(facts.name)
        c = _contribution(facts, self._tolerated)
        self._facts[facts.name] = facts
        self._parts[facts.name] = c
        self._add(c, 1)

    def remove(self, name: str) -> None:
        self._drop(name)
        self._bad.discard(name)

    def mark_bad(self, name: str) -> None:
        self._drop(name)
        self._bad.add(name)

    def clear(self) -> None:
        """Forget every node (a relist replaces them all)."""
        self._reset(self._spot)

    def _drop(self, name: str) -> None:
        old = self._parts.pop(name, None)
        if old is not None:
            del self._facts[name]
            self._add(old, -1)

    def _add(self, c: _Contribution, sign: int) -> None:
        if c.ready:
            self._ready += sign
        if c.product is None:
            return
        self._cliques.add(c.clique, sign)
        pkey = (c.product, c.dra)
        agg = self._products.get(pkey)
        if agg is None:
            agg = self._products[pkey] = _ProductAgg()
        agg.add(c, sign)
        if agg.nodes == 0:
            del self._products[pkey]
        for p in c.mig:
            magg = self._mig.get(p.key)
            if magg is None:
                magg = self._mig[p.key] = _MigAgg()
            magg.add(p, sign)
            if magg.parts == 0:
                del self._mig[p.key]

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        return len(self._facts)

    def __contains__(self, name: object) -> bool:
        return name in self._facts

    @property
    def bad_nodes(self) -> tuple[str, ...]:
        return tuple(sorted(self._bad))

    def nodes(self) -> tuple[NodeFacts, ...]:
        """Every indexed node, sorted by name (O(nodes): for snapshots, not for the hot path)."""
        return tuple(self._facts[n] for n in sorted(self._facts))

    def summary(
        self,
        traits: ClusterTraits,
        health: Health,
        heartbeat: float,
        queues: tuple[QueueHeadroom, ...] = (),
    ) -> ClusterSummary:
        if traits.spot != self._spot:
            self._reaggregate(traits.spot)
        products = tuple(
            rollup.combine_kinds(
                self._kind(name, False),
                self._kind(name, True),
                traits.gpu_allocation,
                self._memory_of(name),
            )
            for name in sorted({name for name, _dra in self._products})
        )
        mig = tuple(
            MigCapacity(
                product=key[0],
                profile=key[1],
                resource_name=key[2],
                allocatable=agg.allocatable,
                free=agg.free,
                largest_free_on_node=max(agg.frees, default=0),
                settled=agg.unsettled == 0,
                gfd_products=tuple(sorted(agg.gfd)),
            )
            for key, agg in sorted(self._mig.items())
        )
        return rollup.cluster_summary(
            self.cluster,
            traits,
            health,
            heartbeat,
            products=products,
            mig=mig,
            queues=queues,
            nodes_total=len(self._facts),
            nodes_ready=self._ready,
            bad_nodes=len(self._bad),
            cliques=self._cliques.cliques(),
        )

    def _kind(self, name: str, dra: bool) -> ProductCapacity | None:
        agg = self._products.get((name, dra))
        if agg is None:
            return None
        return ProductCapacity(
            product=name,
            memory_mib=0,
            total=agg.total,
            allocatable=agg.allocatable,
            allocated=agg.allocated,
            free=agg.free,
            nodes_by_free=rollup.histogram(agg.domains),
            numa_blocks=rollup.histogram(agg.blocks),
            nodes=agg.usable_nodes,
            gfd_products=tuple(sorted(agg.gfd)),
            shared_allocatable=agg.shared_allocatable,
            shared_free=agg.shared_free,
            single_numa_node_free=max((k for k, n in agg.splits.items() if n), default=0),
            domains_by_size=rollup.histogram(agg.sizes),
            whole_nodes_by_free=rollup.histogram(agg.node_free),
            offered=OFFERED_DRA if dra else OFFERED_DEVICE_PLUGIN,
            dra=dra,
            whole_gpus=agg.whole,
            max_node_cpu_millis=max((k for k, n in agg.cpus.items() if n), default=0),
            max_node_memory_mib=max((k for k, n in agg.mems.items() if n), default=0),
        )

    def _memory_of(self, product: str) -> int:
        """The product's memory as summarize reports it: that of its first node by name."""
        memory: set[int] = set()
        for (name, _dra), agg in self._products.items():
            if name == product:
                memory.update(m for m, n in agg.memory.items() if n)
        if len(memory) == 1:
            return next(iter(memory))
        first = min(n for n, c in self._parts.items() if c.product == product)  # rare: mixed memory sizes
        return self._parts[first].memory_mib

    def _reaggregate(self, spot: bool) -> None:
        facts, bad = list(self._facts.values()), set(self._bad)
        self._reset(spot)
        for f in facts:
            self.upsert(f)
        self._bad = bad
