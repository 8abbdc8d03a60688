"""Capacity above the node: NVLink cliques (GB200/GB300 NVL72 racks) and what a job asks of them.

Owns the vocabulary of multi-node NVLink topology that every layer shares: the GFD label that names a
node's NVLink clique (`nvidia.com/gpu.clique` = `<clusterUUID>.<cliqueId>`, reference 1.1), the job's
wish (`topology.nvlinkClique`: required | preferred) and CliqueCapacity, one clique of one product in a
ClusterSummary: a small tuple per clique, so a summary stays O(cliques), never O(nodes).
Pure: no I/O. How cliques are counted is broker.capacity.cliques; how they are fitted, the
nvlink-clique plugin; what level 2 writes, broker.workload.topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CLIQUE_LABEL", "IMEX_DOMAIN_LABEL", "NVLINK_CLIQUE_ANNOTATION", "CliqueCapacity", "NvlinkClique"]

CLIQUE_LABEL = "nvidia.com/gpu.clique"  # GFD: <clusterUUID>.<cliqueId>, one value per NVLink domain
IMEX_DOMAIN_LABEL = "nvidia.com/gpu.imex-domain"  # GFD: the IMEX domain (same shape); read, not used
NVLINK_CLIQUE_ANNOTATION = "gpufed.io/nvlink-clique"  # plain Jobs and other kinds: required | preferred


class NvlinkClique(StrEnum):
    """A job's NVLink wish: none, every pod in one clique, or one clique when one fits (else any nodes)."""

    NONE = "none"
    REQUIRED = "required"
    PREFERRED = "preferred"


@dataclass(frozen=True, slots=True)
class CliqueCapacity:
    """Free whole GPUs of one product inside one NVLink clique of a cluster, over the nodes that take
    the broker's pods. nodes_by_free[k] = nodes of the clique with exactly k free GPUs."""

    clique: str  # the label value, <clusterUUID>.<cliqueId>
    product: str  # catalog name (GB200, GB300, ...)
    nodes: int = 0
    free_nodes: int = 0  # nodes with every GPU free (what a whole-node pod needs)
    free: int = 0  # free GPUs
    nodes_by_free: tuple[int, ...] = ()

    def pods_that_fit(self, gpus_per_pod: int) -> int:
        """Pods of `gpus_per_pod` GPUs the clique takes, each pod on one node."""
        if gpus_per_pod <= 0:
            return 0
        return sum(n * (k // gpus_per_pod) for k, n in enumerate(self.nodes_by_free))
