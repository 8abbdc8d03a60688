"""Shared by the per-plugin tables: run one plugin the way the framework does, describe what it said."""

from __future__ import annotations

from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, ProductCapacity
from broker.scheduler.framework import FilterPlugin, FilterResult, PreparedJob, RunOption, ScorePlugin, Status
from broker.scheduler.placement import PlacementPolicy, cluster_options, prepare
from tests.unit.k8s_builders import product

NOW = 1000.0
UNCHANGED = "unchanged"


def free_nodes(*frees: int) -> tuple[int, ...]:
    """A nodes_by_free histogram from the free GPUs of each node."""
    hist = [0] * (max(frees) + 1)
    for f in frees:
        hist[f] += 1
    return tuple(hist)


def h100(*frees: int, numa: tuple[int, ...] | None = None) -> ProductCapacity:
    return product("H100-80GB", free_nodes(*frees), numa_blocks=free_nodes(*numa) if numa else None)


def l4(*frees: int) -> ProductCapacity:
    return product("L4", free_nodes(*frees), memory_mib=23034, per_node=4, gfd=("NVIDIA-L4",))


def prepared(job: JobRequest) -> PreparedJob:
    return prepare(job, PlacementPolicy())


def run_filter(
    plugin: FilterPlugin,
    job: JobRequest,
    summary: ClusterSummary,
    traits: ClusterTraits | None = None,
    now: float = NOW,
) -> tuple[FilterResult, tuple[RunOption, ...]]:
    """The plugin's result on the cluster's options for the job, and those options."""
    pj = prepared(job)
    options = cluster_options(pj, summary)
    return plugin.filter(pj, summary, traits, now, options), options


def outcome(result: FilterResult, options: tuple[RunOption, ...]) -> object:
    """UNCHANGED (the very options given back), the products (profiles) kept, or (code name, reason, best)."""
    if isinstance(result, Status):
        return (result.code.name, result.reason, result.best)
    if result is options:
        return UNCHANGED
    return [o.mig_profile or o.product for o in result]


def filter_outcome(
    plugin: FilterPlugin,
    job: JobRequest,
    summary: ClusterSummary,
    traits: ClusterTraits | None = None,
    now: float = NOW,
) -> object:
    return outcome(*run_filter(plugin, job, summary, traits, now))


def score_of(
    plugin: ScorePlugin,
    job: JobRequest,
    summary: ClusterSummary,
    traits: ClusterTraits | None = None,
    option: int = 0,
) -> int:
    """The plugin's score for one of the cluster's options for the job (the first by default)."""
    pj = prepared(job)
    return plugin.score(pj, summary, traits, cluster_options(pj, summary)[option])
