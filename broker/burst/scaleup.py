"""Scale-up headroom: a cloud pool's nodes not there yet, counted as capacity that arrives later.

Pure (no I/O, no clock). A cloud cluster's autoscaled pool (settings.burst.pools.<cluster>: product,
gpusPerNode, maxNodes, provisioningDelaySeconds; docs/burst.md) can add nodes the observed summary does
not show. `grow` adds them to the summary as free nodes of the pool's product:

    addable = maxNodes - nodes of that product the cluster has now
    nodes_by_free[gpusPerNode] += addable, free/allocatable/total += addable x gpusPerNode

before the placer's reservations are deducted (broker.cache.fleet_cache), so a job placed into the headroom
holds its GPUs there like any placement: the next job sees the headroom less what was promised, and a
node that arrives is no longer addable, so nothing is counted twice and nothing is ordered twice (the
reservation of a placement into headroom lives for the provisioning delay as well: broker.controller.service).
`summary.autoscale_headroom[product]` says how many GPUs were added.

`needs_scale_up` tells whether a job fits the cluster only thanks to added nodes (then it starts after
the provisioning delay). Best fit takes real nodes before the added ones (they are the fullest), so the
added nodes are the top bucket's; a node reserved in part is counted as real (the answer errs to "fits
now").

The pool's nodes are the cluster's nodes of its product: a pool's product should be one only that pool
has in the cluster (as the demo fleet's L4 pool).
"""

from __future__ import annotations

import dataclasses

from broker.capacity.rollup import rejoin_kinds
from broker.core.catalog import entry
from broker.core.model import ClusterSummary, ProductCapacity, Tier

__all__ = ["grow", "needs_scale_up"]


def _bump(hist: tuple[int, ...], k: int, n: int) -> tuple[int, ...]:
    out = list(hist) + [0] * max(0, k + 1 - len(hist))
    out[k] += n
    return tuple(out)


def _grown(current: ProductCapacity, gpus: int, gpus_per_node: int, addable: int) -> ProductCapacity:
    return dataclasses.replace(
        current,
        total=current.total + gpus,
        allocatable=current.allocatable + gpus,
        free=current.free + gpus,
        nodes_by_free=_bump(current.nodes_by_free, gpus_per_node, addable),
        numa_blocks=_bump(current.numa_blocks, gpus_per_node, addable),
        nodes=current.nodes + addable,
    )


def grow(summary: ClusterSummary, product: str, gpus_per_node: int, max_nodes: int) -> ClusterSummary:
    """The summary with the pool's not-yet-added nodes as free nodes of `product` (cloud clusters only)."""
    if summary.tier is not Tier.CLOUD or max_nodes <= 0 or gpus_per_node <= 0:
        return summary
    current = summary.product(product)
    addable = max_nodes - (current.nodes if current is not None else 0)
    if addable <= 0:
        return summary
    gpus = addable * gpus_per_node
    if current is None:
        known = entry(product)
        current = ProductCapacity(
            product=product,
            memory_mib=known.memory_mib if known is not None else 0,
            total=0,
            allocatable=0,
            allocated=0,
            free=0,
            gfd_products=known.gfd[:1] if known is not None else (product,),
        )
        products = (*summary.products, current)
    else:
        products = summary.products
    if current.kinds:  # served both ways: the pool's new nodes come with the device plugin
        plugin, dra = current.kinds
        grown = rejoin_kinds(current, (_grown(plugin, gpus, gpus_per_node, addable), dra))
    else:
        grown = _grown(current, gpus, gpus_per_node, addable)
    return dataclasses.replace(
        summary,
        products=tuple(grown if p.product == product else p for p in products),
        autoscale_headroom={**summary.autoscale_headroom, product: gpus},
    )


def needs_scale_up(
    capacity: ProductCapacity, added_gpus: int, gpus_per_node: int, gpus_per_pod: int, pods: int
) -> bool:
    """Whether `pods` pods of `gpus_per_pod` GPUs fit only on the added nodes' GPUs."""
    if added_gpus <= 0 or gpus_per_node <= 0:
        return False
    added_nodes = added_gpus // gpus_per_node
    hist = list(capacity.nodes_by_free)
    if gpus_per_node < len(hist):
        hist[gpus_per_node] = max(0, hist[gpus_per_node] - added_nodes)
    real = ProductCapacity(capacity.product, capacity.memory_mib, 0, 0, 0, 0, tuple(hist))
    return real.pods_that_fit(gpus_per_pod) < pods
