"""Records the store keeps beside jobs and summaries, shared by the ports and the pure core.

Owns plain, frozen shapes: NodeDetail (with NodeMig, NodeNuma), a node's row in the fleet view that
the pollers write per cluster (built by broker.capacity.node_detail), and Run, one attempt's run on a priced
cluster, the unit of cloud spend (accounted by broker.burst.spend), and Saving, the cloud cost a burst-back
move is expected to avoid, and ClusterEvent, a change of a member's health in its event stream. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.core.gpu_health import GpuFault
from broker.core.model import Health

__all__ = ["NodeDetail", "NodeMig", "NodeNuma", "Run", "Saving"]


@dataclass(frozen=True)
class NodeMig:
    profile: str
    allocatable: int
    free: int


@dataclass(frozen=True)
class NodeNuma:
    zone: str
    gpus_allocatable: int
    gpus_available: int


@dataclass(frozen=True)
class NodeDetail:
    name: str
    product: str | None  # catalog name; None: no NVIDIA GPU
    ready: bool
    cordoned: bool
    gpus: int  # physical GPUs
    whole_allocatable: int
    whole_free: int
    shared_allocatable: int  # time-sliced / MPS replicas
    shared_free: int
    shared_replicas: int
    mig_strategy: str
    mig: tuple[NodeMig, ...]
    numa: tuple[NodeNuma, ...]
    topology_policy: str
    taints: tuple[str, ...]  # "key=value:Effect"
    offers_nothing: str | None  # why the node offers the broker no GPU now; None when it offers some
    gpu_faults: tuple[GpuFault, ...] = ()  # its GPUs that are not healthy: which, why, since when
    quarantined: str | None = None  # why the whole node is out (repeated GPU faults), else None

    @property
    def offers(self) -> bool:
        return self.offers_nothing is None


@dataclass(frozen=True)
class Run:
    """One attempt's run on a priced cluster."""

    job_id: str
    attempt: int
    tenant: str
    cluster: str
    product: str
    gpus: int
    price_per_gpu_hour: float
    started_at: float
    ended_at: float
    spot: bool = False

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended_at - self.started_at)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_hours_since(self.started_at)

    @property
    def cost(self) -> float:
        return self.price_per_gpu_hour * self.gpu_hours

    def gpu_hours_since(self, since: float) -> float:
        """The GPU-hours of the run that fall at or after `since` (a period's start)."""
        return self.gpus * max(0.0, self.ended_at - max(self.started_at, since)) / 3600

    def cost_since(self, since: float) -> float:
        return self.price_per_gpu_hour * self.gpu_hours_since(since)


@dataclass(frozen=True)
class Saving:
    """The cloud cost one move back on-prem is expected to avoid (broker.burst.burst_back; `gpufed spend`)."""

    job_id: str
    attempt: int  # the cloud attempt that was stopped
    tenant: str
    cluster: str  # the cloud cluster it left
    to_cluster: str
    at: float
    dollars: float
    gpu_hours: float


@dataclass(frozen=True)
class ClusterEvent:
    """A change of a member cluster's health (or its fence), with the cause."""

    cluster: str
    at: float
    health: Health
    reason: str = ""
