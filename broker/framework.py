"""The level-1 plugin framework, in the shape of kube-scheduler's and Karmada's.

Owns the Status codes, the FilterPlugin / ScorePlugin protocols, the per-cluster CycleState the plugins
share (the candidate products, "options", that product-level filters narrow), run_filters / run_scores,
and the NoFit diagnosis built from rejections. Pure: plugins see a JobRequest, a ClusterSummary and the
CycleState, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol, runtime_checkable

from broker.model import (
    ClusterRejection,
    ClusterSummary,
    ClusterTraits,
    JobRequest,
    MigCapacity,
    NoFit,
    ProductCapacity,
)

__all__ = [
    "Code",
    "CycleState",
    "FilterPlugin",
    "Option",
    "ScorePlugin",
    "Status",
    "build_nofit",
    "run_filters",
    "run_scores",
    "weighted_total",
]


class Code(IntEnum):
    SUCCESS = 0
    UNSCHEDULABLE = 1  # might fit later (capacity frees up)
    UNSCHEDULABLE_AND_UNRESOLVABLE = 2  # will not fit whatever frees up (wrong product, not allowed)
    ERROR = 3  # a plugin failed; the cluster is skipped


@dataclass(frozen=True)
class Status:
    """A plugin's verdict. `reason` reads as a sentence fragment ("no node with 8 free H100-80GB");
    `best` says how close the cluster came (8 wanted, `best` = 6 free on one node)."""

    code: Code = Code.SUCCESS
    reason: str = ""
    plugin: str = ""
    best: int | None = None

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @staticmethod
    def success() -> Status:
        return Status()

    @staticmethod
    def unschedulable(reason: str, best: int | None = None) -> Status:
        return Status(Code.UNSCHEDULABLE, reason, best=best)

    @staticmethod
    def unresolvable(reason: str) -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)

    @staticmethod
    def error(reason: str) -> Status:
        return Status(Code.ERROR, reason)


@dataclass(frozen=True)
class Option:
    """One way to run the job in a cluster: a product and the resource each pod asks for."""

    product: str
    memory_mib: int
    resource_name: str  # nvidia.com/gpu, nvidia.com/mig-<profile>; "" for a job without GPUs
    units_per_pod: int
    mig_profile: str | None = None
    compute_slices: int = 7  # sevenths of a GPU per unit (7 for a whole GPU)
    capacity: ProductCapacity | None = None
    mig: MigCapacity | None = None
    gfd_products: tuple[str, ...] = ()

    @property
    def gpu_fraction_per_unit(self) -> float:
        return self.compute_slices / 7


@dataclass
class CycleState:
    """What the plugins share while one cluster is evaluated for one job (kube-scheduler's CycleState).

    `options` starts as every product/resource the cluster could serve the job with; product-level
    filters narrow it. `chosen` is set after filtering, for the score plugins.
    """

    now: float
    traits: ClusterTraits | None
    options: list[Option]
    staleness_limit_s: float = 120.0
    binpack: bool = True
    price_ceiling: float = 10.0
    chosen: Option | None = None
    notes: dict[str, str] = field(default_factory=dict)

    def price(self, summary: ClusterSummary, option: Option) -> float | None:
        """Price per hour of one unit of an option: per GPU-hour, scaled for MIG slices; None if unknown."""
        per_gpu = summary.price_per_gpu_hour.get(option.product)
        if per_gpu is None:
            return None
        return per_gpu * option.gpu_fraction_per_unit


@runtime_checkable
class FilterPlugin(Protocol):
    @property
    def name(self) -> str: ...

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def weight(self) -> int: ...

    def score(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> int: ...


def run_filters(
    plugins: Sequence[FilterPlugin], job: JobRequest, summary: ClusterSummary, ctx: CycleState
) -> list[Status]:
    """Run the filters in order until one rejects; returns every status run (the last one rejects, if any).

    A plugin that raises gives an Error status naming the exception: a broken plugin skips a cluster,
    it never crashes the placer.
    """
    statuses = []
    for plugin in plugins:
        try:
            status = plugin.filter(job, summary, ctx)
        except Exception as exc:  # a bug in one plugin must not stop placement elsewhere
            status = Status.error(f"{type(exc).__name__}: {exc}")
        status = Status(status.code, status.reason, plugin.name, status.best)
        statuses.append(status)
        if not status.is_success:
            break
    return statuses


def run_scores(
    plugins: Sequence[ScorePlugin], job: JobRequest, summary: ClusterSummary, ctx: CycleState
) -> dict[str, int]:
    """Every score plugin's score, clamped to 0..100 (a plugin that raises scores 0)."""
    scores = {}
    for plugin in plugins:
        try:
            value = int(plugin.score(job, summary, ctx))
        except Exception:  # a broken score must not stop placement
            value = 0
        scores[plugin.name] = max(0, min(100, value))
    return scores


def weighted_total(scores: Mapping[str, int], weights: Mapping[str, int]) -> int:
    """The weighted mean of the scores, 0..100 (plugins without a weight count 1)."""
    total_weight = sum(max(0, weights.get(name, 1)) for name in scores)
    if total_weight == 0:
        return 0
    return round(sum(v * max(0, weights.get(n, 1)) for n, v in scores.items()) / total_weight)


def build_nofit(total_clusters: int, failures: Iterable[tuple[str, Status]]) -> NoFit:
    """NoFit from each rejected cluster's failing status: "0/5 clusters are available: 3 no node with 8
    free H100-80GB (best: 6 on onprem-b), 1 stale, 1 burst not allowed."."""
    rejections = tuple(
        ClusterRejection(
            cluster=cluster,
            plugin=status.plugin,
            reason=status.reason,
            best=status.best,
            unresolvable=status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        )
        for cluster, status in sorted(failures, key=lambda cs: cs[0])
    )
    return NoFit(total_clusters=total_clusters, rejections=rejections)
