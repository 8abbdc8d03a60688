"""Reservations in the pure core: what the placer may assume about a cluster (Kueue's "assume").

A placement holds its GPUs as a Reservation from the moment it is decided until the member cluster
shows the pods (or the job ends, or the reservation expires). The placer must see each cluster as
observed capacity minus live reservations; `deduct` computes exactly that, over the same histograms
level 1 reads, with `now` handed in (no clock here):

- whole GPUs: each reserved pod takes its GPUs from one placement domain, the best-fitting one (the
  smallest domain with enough free GPUs: where a bin-packing scheduler, kubesim's or a topology-aware
  one, binds it), of the kind it asks through (a product served both ways keeps each kind's
  histograms, ProductCapacity.kinds: a reservation of resource `gpu.nvidia.com`, the DeviceClass, holds
  DRA GPUs, one of nvidia.com/gpu the device plugin's; the sums are made again). A Kueue quota entry is
  charged only by the resource it covers, so GPUs held through claims are not charged to nvidia.com/gpu. A pod that no domain can hold any more (capacity changed under the reservation)
  drains the largest domain instead, so the assumption never shows more room than there is.
  `numa_blocks` (largest free block inside one NUMA zone per node) loses each pod the same way.
- MIG slices: free drops by the reserved slices; the largest free on one node drops by them too
  (pessimistic: the pod may land on the node with the most free slices), staying >= 1 while any is free.
- NVLink cliques: a reservation placed in a clique (Reservation.clique) takes its pods from that
  clique's nodes_by_free the same best-fit way, so a second gang is not promised the same rack.
- Kueue quota: a reserved Job is not yet admitted, so its units count as used in every ClusterQueue
  quota entry covering its resource (pessimistic where several flavors could admit it).

`live` filters what counts (same cluster, not expired); `units_held` sums per resource. The atomic step
in the store (a compare-and-set on the summary version and the cluster's reservation ledger, see
adapters/redis_store.py) makes sure the decision was taken on exactly the state it commits against, so
no interleaving of any number of placers can over-commit what `deduct` models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from broker.capacity.rollup import rejoin_kinds
from broker.core.k8s_names import DRA_GPU_CLASS, GPU
from broker.core.model import ClusterSummary, MigCapacity, ProductCapacity, Reservation
from broker.core.topology import CliqueCapacity

__all__ = ["deduct", "deduct_held", "live", "take_best_fit", "units_held"]

_WHOLE = (GPU, DRA_GPU_CLASS)  # whole GPUs asked as nvidia.com/gpu, or through a claim of the DeviceClass


def live(reservations: Iterable[Reservation], cluster: str, now: float) -> list[Reservation]:
    """The reservations that count against `cluster` at `now`."""
    return [r for r in reservations if r.cluster == cluster and r.expires_at > now]


def units_held(reservations: Iterable[Reservation]) -> dict[tuple[str, str], int]:
    """(product, resource name) -> units held by the given reservations."""
    held: dict[tuple[str, str], int] = {}
    for r in reservations:
        key = (r.product, r.resource_name)
        held[key] = held.get(key, 0) + r.units
    return held


def take_best_fit(hist: tuple[int, ...], per_pod: int, pods: int) -> tuple[int, ...]:
    """A domains-by-free histogram after `pods` pods of `per_pod` units each took their room.

    Each pod goes to the smallest domain that can hold it; a pod no domain can hold drains the largest
    non-empty domain (pessimistic). Trailing empty buckets are trimmed."""
    if per_pod <= 0 or pods <= 0:
        return hist
    counts = list(hist)
    for _ in range(pods):
        k = per_pod
        while k < len(counts) and counts[k] == 0:
            k += 1
        if k < len(counts):
            counts[k] -= 1
            counts[k - per_pod] += 1
            continue
        top = len(counts) - 1
        while top > 0 and counts[top] == 0:
            top -= 1
        if top <= 0:
            break
        counts[top] -= 1
        counts[0] += 1
    while len(counts) > 1 and counts[-1] == 0:
        counts.pop()
    return tuple(counts)


def _deduct_product(p: ProductCapacity, reservations: list[Reservation]) -> ProductCapacity:
    if p.kinds:  # served both ways: each reservation takes from the kind its pods ask through
        kinds = tuple(
            _deduct_kind(k, [r for r in reservations if (r.resource_name == DRA_GPU_CLASS) == k.dra])
            for k in p.kinds
        )
        return rejoin_kinds(p, kinds)
    return _deduct_kind(p, reservations)


def _deduct_kind(p: ProductCapacity, reservations: list[Reservation]) -> ProductCapacity:
    if not reservations:
        return p
    nodes_by_free, numa_blocks = p.nodes_by_free, p.numa_blocks
    units = 0
    for r in reservations:
        nodes_by_free = take_best_fit(nodes_by_free, r.units_per_pod, r.pods)
        numa_blocks = take_best_fit(numa_blocks, r.units_per_pod, r.pods)
        units += r.units
    units = min(units, p.free)
    return dataclasses.replace(
        p,
        allocated=p.allocated + units,
        free=p.free - units,
        nodes_by_free=nodes_by_free,
        numa_blocks=numa_blocks,
    )


def _deduct_mig(m: MigCapacity, units: int) -> MigCapacity:
    free = max(0, m.free - units)
    largest = max(min(free, m.largest_free_on_node - units), 1 if free else 0)
    return dataclasses.replace(m, free=free, largest_free_on_node=largest)


def deduct(summary: ClusterSummary, reservations: Iterable[Reservation], now: float) -> ClusterSummary:
    """The summary as the placer must see it: observed capacity minus the live reservations on it."""
    return deduct_held(summary, live(reservations, summary.cluster, now))


def deduct_held(summary: ClusterSummary, mine: Sequence[Reservation]) -> ClusterSummary:
    """The summary minus `mine`, each counted (the caller chose the live ones of this cluster).

    Deducting in steps is deducting at once: deduct_held(deduct_held(s, a), b) == deduct_held(s, a + b)
    (histograms taken pod by pod in order, units capped at what is free, counters added), so a cache
    holding the placeable view of a cluster adds one new reservation to it without going over the others
    again (broker.cache.fleet_cache.hold: a burst's decisions are each O(1), not O(reservations held))."""
    if not mine:
        return summary
    whole: dict[str, list[Reservation]] = {}
    for r in mine:
        if r.resource_name in _WHOLE:
            whole.setdefault(r.product, []).append(r)
    held = units_held(mine)
    products = tuple(
        _deduct_product(p, whole[p.product]) if p.product in whole else p for p in summary.products
    )
    migs = tuple(
        _deduct_mig(m, held[(m.product, m.resource_name)])
        if held.get((m.product, m.resource_name), 0) > 0
        else m
        for m in summary.mig
    )
    by_resource: dict[str, int] = {}
    for (_, resource), units in held.items():
        by_resource[resource] = by_resource.get(resource, 0) + units
    queues = tuple(
        dataclasses.replace(q, used=q.used + by_resource[q.resource]) if q.resource in by_resource else q
        for q in summary.queues
    )
    cliques = summary.cliques
    in_clique = [r for r in mine if r.clique is not None and r.resource_name in _WHOLE]
    if in_clique:
        cliques = tuple(_deduct_clique(c, in_clique) for c in cliques)
    return dataclasses.replace(summary, products=products, mig=migs, queues=queues, cliques=cliques)


def _deduct_clique(c: CliqueCapacity, reservations: list[Reservation]) -> CliqueCapacity:
    mine = [r for r in reservations if r.clique == c.clique and r.product == c.product]
    if not mine:
        return c
    hist = c.nodes_by_free
    for r in mine:
        hist = take_best_fit(hist, r.units_per_pod, r.pods)
    free = sum(k * n for k, n in enumerate(hist))
    free_nodes = max(0, c.free_nodes - sum(r.pods for r in mine))  # each pod may break one free node
    return dataclasses.replace(c, free=free, nodes_by_free=hist, free_nodes=free_nodes)
