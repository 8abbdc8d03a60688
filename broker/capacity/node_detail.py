"""Per-node detail for the fleet view: what one node offers the broker, and why it offers nothing.

Owns `node_detail(facts, spot)` (a NodeDetail, broker.core.records: a compact, JSON-ready row per GPU node), the one place
that says in words why a node offers the broker nothing ("cordoned", "taint x=y:NoSchedule not
tolerated", "all 8 GPUs in use", ...). The pollers write one table of these per cluster to Redis at a
slow cadence (see adapters.redis_store `P:nodes:<cluster>`); the summary placement reads stays O(1) per
cluster and carries no nodes. Pure: no I/O, no clock.
"""

from __future__ import annotations

from broker.capacity import rollup
from broker.capacity.gpu_overlay import QUARANTINE_TAINT
from broker.core.gpu_health import NODE_WIDE, ClusterGpuHealth
from broker.core.model import NodeFacts
from broker.core.records import NodeDetail, NodeMig, NodeNuma

__all__ = ["NodeDetail", "NodeMig", "NodeNuma", "node_detail", "nodes_table"]


def _taint_text(key: str, value: str, effect: str) -> str:
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def _why_nothing(node: NodeFacts, tolerated: frozenset[str], whole: int, mig: int, shared: int) -> str | None:
    if node.product is None:
        return "no NVIDIA GPU"
    if not node.ready:
        return "node not Ready"
    if node.unschedulable:
        return "cordoned (spec.unschedulable)"
    blocking = [t for t in node.taints if t.effect in ("NoSchedule", "NoExecute") and t.key not in tolerated]
    if blocking:
        t = blocking[0]
        return f"taint {_taint_text(t.key, t.value, t.effect)} not tolerated by the broker's workloads"
    if not node.mig_settled:
        return "MIG reconfiguring (nvidia.com/mig.config.state is not success)"
    if node.gpus_allocatable == 0 and not node.mig and node.shared_allocatable == 0:
        return "no allocatable GPU resource (device plugin not reporting)"
    if whole == 0 and mig == 0 and shared == 0:
        return f"all {node.gpu_count} GPUs in use"
    return None


def node_detail(node: NodeFacts, spot: bool = False, health: ClusterGpuHealth | None = None) -> NodeDetail:
    """One node as the fleet view shows it, judged with the tolerations the broker's Jobs get there, with
    its unhealthy GPUs (which, why, since when) and its quarantine from `health`."""
    tolerated = rollup.tolerated_taint_keys(spot)
    takes = rollup.accepts_broker_pods(node, tolerated) and node.mig_settled
    whole_free = node.gpus_free if takes else 0
    shared_free = max(0, node.shared_allocatable - node.shared_allocated) if takes else 0
    migs = tuple(NodeMig(s.profile, s.allocatable, s.free if takes else 0) for s in node.mig)
    faults = health.on_node(node.name) if health else ()
    quarantine = health.quarantined_node(node.name) if health else None
    why = _why_nothing(node, tolerated, whole_free, sum(m.free for m in migs), shared_free)
    if any(t.key == QUARANTINE_TAINT for t in node.taints):
        held = quarantine.reason if quarantine else "; ".join(f.reason for f in faults if f.gpu == NODE_WIDE)
        why = f"GPU health quarantine: {held or 'repeated GPU faults'}"
    return NodeDetail(
        name=node.name,
        product=node.product.name if node.product else None,
        ready=node.ready,
        cordoned=node.unschedulable,
        gpus=node.gpu_count,
        whole_allocatable=node.gpus_allocatable,
        whole_free=whole_free,
        shared_allocatable=node.shared_allocatable,
        shared_free=shared_free,
        shared_replicas=node.shared_replicas,
        mig_strategy=str(node.mig_strategy),
        mig=migs,
        numa=tuple(NodeNuma(z.name, z.gpus_allocatable, z.gpus_available) for z in node.numa_zones),
        topology_policy=node.topology_policy,
        taints=tuple(_taint_text(t.key, t.value, t.effect) for t in node.taints),
        offers_nothing=why,
        gpu_faults=faults,
        quarantined=quarantine.reason if quarantine else None,
    )


def nodes_table(
    nodes: tuple[NodeFacts, ...] | list[NodeFacts], spot: bool = False, health: ClusterGpuHealth | None = None
) -> tuple[NodeDetail, ...]:
    """The GPU nodes of a cluster (nodes without an NVIDIA GPU are left out), by name."""
    return tuple(
        node_detail(n, spot, health) for n in sorted(nodes, key=lambda n: n.name) if n.product is not None
    )
