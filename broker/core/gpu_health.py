"""GPU health as the rest of the broker sees it: which GPUs are unhealthy, why, since when, and the
cluster's quarantine state. Shapes only (the rules are broker.health.quarantine, the XID catalog
broker.health.xid, the capacity effect broker.capacity.gpu_overlay).

    GpuState          healthy | unhealthy | recovering (the source says healthy, not yet for long enough)
    GpuFault          one GPU that is not healthy: node, index (-1: the whole node, a condition or taint
                      that names no GPU), state, reason ("XID 79 (GPU has fallen off the bus)"), since,
                      the source that said so, whether it is quarantined, and the pod holding it
    NodeQuarantine    a node every GPU of which is out, after repeated faults (escalation rules)
    ClusterGpuHealth  the cluster's faults, quarantined nodes, the circuit breaker and the recent fault
                      count (the level-1 health penalty reads it); published in the ClusterSummary
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["NODE_WIDE", "ClusterGpuHealth", "GpuFault", "GpuState", "NodeQuarantine"]

NODE_WIDE = -1  # GpuFault.gpu of a signal that names no GPU (a node condition or taint)


class GpuState(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    RECOVERING = "recovering"  # the source says healthy again, not yet for the configured time


@dataclass(frozen=True)
class GpuFault:
    """One GPU the broker does not count as healthy."""

    node: str
    gpu: int  # the GPU's index on the node (dcgm-exporter's `gpu` label); NODE_WIDE: the whole node
    state: GpuState
    reason: str  # "XID 79 (GPU has fallen off the bus)", "node condition GpuXidError: ..."
    since: float  # epoch seconds the current state began
    source: str = ""  # dcgm | prometheus | condition | taint | dra
    xid: int | None = None
    quarantined: bool = True  # False: held back by the circuit breaker (still shown, still counted free)
    pod: str | None = None  # namespace/name of the pod holding the GPU when the fault was seen
    uuid: str | None = None

    @property
    def where(self) -> str:
        return f"node {self.node}" if self.gpu == NODE_WIDE else f"GPU {self.gpu} of node {self.node}"


@dataclass(frozen=True)
class NodeQuarantine:
    """A node taken out whole after repeated faults (broker.health.escalation's rules)."""

    node: str
    reason: str  # "rule node-many-gpus: 3 GPUs faulted within 3600 s"
    since: float


@dataclass(frozen=True)
class ClusterGpuHealth:
    """What the health sources said about a cluster's GPUs, after the rules (empty: nothing wrong, or
    no source configured). `recent_faults` counts fatal faults inside the breaker window."""

    faults: tuple[GpuFault, ...] = ()
    nodes: tuple[NodeQuarantine, ...] = ()
    breaker_open: bool = False
    breaker_reason: str = ""
    recent_faults: int = 0
    observed: bool = False  # dcgm-exporter's series were read (a pod's death by a GPU fault shows here)

    def on_node(self, node: str) -> tuple[GpuFault, ...]:
        return tuple(f for f in self.faults if f.node == node)

    def quarantined_node(self, node: str) -> NodeQuarantine | None:
        return next((q for q in self.nodes if q.node == node), None)
