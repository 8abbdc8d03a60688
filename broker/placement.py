"""Level 1: choose the cluster (and the product inside it) for a job, over ClusterSummaries.

Owns the PlacementPolicy, the per-cluster options (which product and resource could serve the job),
the default filter/score plugin chains, the on-prem-first rule for burst, deterministic tie-breaks,
`place()` (Placement or NoFit) and `explain()` (every cluster's verdict, for a dry run), and the
PhaseObserver hook through which a tracer sees each plugin phase (filter, score) per cluster. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Protocol

from broker import catalog
from broker.capacity import GPU
from broker.framework import (
    CycleState,
    FilterPlugin,
    Option,
    ScorePlugin,
    Status,
    build_nofit,
    run_filters,
    run_scores,
    weighted_total,
)
from broker.model import ClusterSummary, ClusterTraits, JobRequest, NoFit, Placement, Tier
from broker.plugins.allowlist import ClusterAllowList
from broker.plugins.binpack import BinPackScore, tightness
from broker.plugins.burst import BurstEligibility
from broker.plugins.gpu_fit import WholeGpuFit
from broker.plugins.gpu_product import GpuProductMemory
from broker.plugins.health import HealthFreshness
from broker.plugins.kueue import KueueHeadroom, QueueHeadroomScore
from broker.plugins.mig_fit import MigFit
from broker.plugins.numa import NumaFit
from broker.plugins.price import PriceCap, PriceScore

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORES",
    "ClusterVerdict",
    "PlacementPolicy",
    "cluster_options",
    "explain",
    "place",
]

DEFAULT_FILTERS: tuple[FilterPlugin, ...] = (
    HealthFreshness(),
    ClusterAllowList(),
    BurstEligibility(),
    GpuProductMemory(),
    WholeGpuFit(),
    MigFit(),
    NumaFit(),
    PriceCap(),
    KueueHeadroom(),
)
DEFAULT_SCORES: tuple[ScorePlugin, ...] = (BinPackScore(), PriceScore(), QueueHeadroomScore())
ONPREM_PREFERRED = "feasible, but on-prem capacity is preferred"


@dataclass(frozen=True)
class PlacementPolicy:
    """How level 1 decides. Weights are per score plugin name; a plugin without one uses its own."""

    staleness_limit_s: float = 120.0  # a summary older than this is "stale"
    strategy: str = "binpack"  # "binpack" (fill nodes, keep big blocks whole) or "spread"
    weights: Mapping[str, int] = field(default_factory=dict)
    prefer_onprem: bool = True  # a cloud cluster is chosen only when no on-prem cluster fits
    price_ceiling_per_gpu_hour: float = 10.0  # the price that scores 0
    filters: tuple[FilterPlugin, ...] = DEFAULT_FILTERS
    scores: tuple[ScorePlugin, ...] = DEFAULT_SCORES

    def weight(self, plugin: ScorePlugin) -> int:
        return self.weights.get(plugin.name, plugin.weight)


@dataclass(frozen=True)
class ClusterVerdict:
    """One cluster's evaluation: the filter statuses run, the option picked, its scores."""

    cluster: str
    tier: Tier
    statuses: tuple[Status, ...]
    option: Option | None = None
    scores: Mapping[str, int] = field(default_factory=dict)
    score: int = 0
    chosen: bool = False
    note: str = ""

    @property
    def feasible(self) -> bool:
        return all(s.is_success for s in self.statuses)

    @property
    def rejection(self) -> Status | None:
        return next((s for s in self.statuses if not s.is_success), None)


def cluster_options(job: JobRequest, summary: ClusterSummary) -> list[Option]:
    """Every product/resource of a cluster that could serve the job, before any capacity check.

    MIG by name matches the profile; MIG by need takes every configured profile that meets the need
    (the smallest fitting one wins later). A job without GPUs gets one resource-less option.
    """
    if job.wants_mig:
        out = []
        for m in summary.mig:
            if job.mig_profile is not None:
                if m.profile != job.mig_profile and m.profile.replace("+", ".") != job.mig_profile:
                    continue
            elif job.mig_need is not None:
                profile = catalog.mig_profile(m.product, m.profile)
                if profile is None or not catalog.profile_satisfies(profile, job.mig_need):
                    continue
            slices, memory_gb, _me = catalog.parse_profile(m.profile)
            out.append(
                Option(
                    product=m.product,
                    memory_mib=memory_gb * 1024,
                    resource_name=m.resource_name,
                    units_per_pod=job.mig_slices_per_pod,
                    mig_profile=m.profile,
                    compute_slices=slices,
                    mig=m,
                    gfd_products=m.gfd_products,
                )
            )
        return out
    if job.gpus_per_pod <= 0:
        return [Option(product="", memory_mib=0, resource_name="", units_per_pod=0)]
    return [
        Option(
            product=p.product,
            memory_mib=p.memory_mib,
            resource_name=GPU,
            units_per_pod=job.gpus_per_pod,
            capacity=p,
            gfd_products=p.gfd_products,
        )
        for p in summary.products
        if p.allocatable > 0 or p.nodes > 0
    ]


def _best_option(job: JobRequest, summary: ClusterSummary, options: Sequence[Option]) -> Option:
    """Inside one cluster: the smallest MIG profile, then the cheapest, then the snuggest fit, by name."""

    def key(o: Option) -> tuple[int, int, float, int, str, str]:
        price = summary.price_per_gpu_hour.get(o.product, 0.0)
        return (
            o.compute_slices,
            o.memory_mib if o.mig else 0,
            price,
            -tightness(o, job),
            o.product,
            o.mig_profile or "",
        )

    return min(options, key=key)


class PhaseObserver(Protocol):
    """The tracer hook: `phase(name, cluster)` wraps each plugin phase ("filter", "score") of one
    cluster's evaluation and yields a dict into which the phase writes its outcome under "result"
    ("pass", "<plugin>: <reason>", or the weighted score). Plugins never see it."""

    def phase(self, phase: str, cluster: str) -> AbstractContextManager[dict[str, str]]: ...


def _phase(
    observer: PhaseObserver | None, phase: str, cluster: str
) -> AbstractContextManager[dict[str, str]]:
    return nullcontext({}) if observer is None else observer.phase(phase, cluster)


def _evaluate(
    job: JobRequest,
    summary: ClusterSummary,
    traits: ClusterTraits | None,
    policy: PlacementPolicy,
    now: float,
    observer: PhaseObserver | None = None,
) -> ClusterVerdict:
    ctx = CycleState(
        now=now,
        traits=traits,
        options=cluster_options(job, summary),
        staleness_limit_s=policy.staleness_limit_s,
        binpack=policy.strategy != "spread",
        price_ceiling=policy.price_ceiling_per_gpu_hour,
    )
    with _phase(observer, "filter", summary.cluster) as note:
        statuses = tuple(run_filters(policy.filters, job, summary, ctx))
        failed = next((s for s in statuses if not s.is_success), None)
        note["result"] = "pass" if failed is None else f"{failed.plugin}: {failed.reason}"
    if failed is not None:
        return ClusterVerdict(summary.cluster, summary.tier, statuses)
    with _phase(observer, "score", summary.cluster) as note:
        ctx.chosen = _best_option(job, summary, ctx.options)
        scores = run_scores(policy.scores, job, summary, ctx)
        weights = {p.name: policy.weight(p) for p in policy.scores}
        total = weighted_total(scores, weights)
        note["result"] = str(total)
    return ClusterVerdict(summary.cluster, summary.tier, statuses, ctx.chosen, scores, total)


def explain(
    job: JobRequest,
    summaries: Sequence[ClusterSummary],
    traits: Mapping[str, ClusterTraits],
    policy: PlacementPolicy,
    now: float,
    observer: PhaseObserver | None = None,
) -> list[ClusterVerdict]:
    """Every cluster's verdict, by cluster name; the one place() would choose has chosen=True."""
    verdicts = [_evaluate(job, s, traits.get(s.cluster), policy, now, observer) for s in summaries]
    feasible = [v for v in verdicts if v.feasible]
    if policy.prefer_onprem and any(v.tier is not Tier.CLOUD for v in feasible):
        pool = [v for v in feasible if v.tier is not Tier.CLOUD]
    else:
        pool = feasible
    winner = min(pool, key=lambda v: (-v.score, v.cluster), default=None)
    pooled = {v.cluster for v in pool}
    out = []
    for v in verdicts:
        if winner is not None and v.cluster == winner.cluster:
            out.append(replace(v, chosen=True))
        elif v.feasible and v.cluster not in pooled:
            out.append(replace(v, note=ONPREM_PREFERRED))
        else:
            out.append(v)
    return sorted(out, key=lambda v: v.cluster)


def place(
    job: JobRequest,
    summaries: Sequence[ClusterSummary],
    traits: Mapping[str, ClusterTraits],
    policy: PlacementPolicy,
    now: float,
    observer: PhaseObserver | None = None,
) -> Placement | NoFit:
    """Level 1: the best cluster for the job, or a NoFit that says why each cluster was rejected.
    `observer` (a tracer hook) is told of each plugin phase per cluster."""
    verdicts = explain(job, summaries, traits, policy, now, observer)
    chosen = next((v for v in verdicts if v.chosen), None)
    if chosen is None or chosen.option is None:
        failures = [(v.cluster, v.rejection) for v in verdicts if v.rejection is not None]
        return build_nofit(len(verdicts), [(c, s) for c, s in failures if s is not None])
    o = chosen.option
    return Placement(
        cluster=chosen.cluster,
        product=o.product,
        resource_name=o.resource_name,
        units_per_pod=o.units_per_pod,
        pods=job.pods,
        score=chosen.score,
        scores=dict(chosen.scores),
        mig_profile=o.mig_profile,
        burst=chosen.tier is Tier.CLOUD,
        gfd_products=o.gfd_products,
    )
