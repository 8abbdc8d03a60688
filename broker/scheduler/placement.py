"""Level 1: choose the cluster (and the product inside it) for a job, over ClusterSummaries.

Owns the PlacementPolicy (the plugin chains, built from the registry), the per-cluster options (which
product and resource could serve the job, indexed once per summary), the on-prem-first rule for
burst, deterministic tie-breaks, and the steps a placer composes:

    prepare(job, policy)                          PreFilter: job-level work, once per decision
    evaluate(prepared, summary, traits, policy, now)   one cluster's verdict (filters, option, scores)
    decide(prepared, verdicts, policy)            Placement or NoFit from the verdicts
    annotate(verdicts, policy)                    explain's view: which one is chosen, why others lost

`place()` = decide(evaluate each); `explain()` = annotate(evaluate each); `explain_and_decide()` gives
both from one evaluation of each cluster. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from broker.core import catalog
from broker.core.k8s_names import DRA_MIG_CLASS, GPU, same_profile
from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, NoFit, Placement, Tier
from broker.scheduler.framework import (
    PLACEMENT_FIELDS,
    SKIPPED,
    Code,
    FilterPlugin,
    PreparedJob,
    RunOption,
    ScorePlugin,
    Status,
    build_nofit,
    memo,
    run_filters,
    run_scores,
)
from broker.scheduler.plugins import registry
from broker.scheduler.plugins.binpack import tightness
from broker.scheduler.plugins.gpu_product import describe_gpu_need
from broker.scheduler.plugins.health import HealthFreshness

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORES",
    "ClusterVerdict",
    "PlacementPolicy",
    "annotate",
    "cluster_options",
    "decide",
    "evaluate",
    "explain",
    "explain_and_decide",
    "place",
    "prepare",
]

DEFAULT_FILTERS: tuple[FilterPlugin, ...] = registry.build_filters()
DEFAULT_SCORES: tuple[ScorePlugin, ...] = registry.build_scores()
ONPREM_PREFERRED = "feasible, but on-prem capacity is preferred"


@functools.lru_cache(maxsize=64)
def _chain_statuses(names: tuple[str, ...]) -> tuple[tuple[Status, ...], tuple[Status, ...]]:
    """The statuses of a chain's filters when they pass, and when they are skipped (one set per chain)."""
    return (
        tuple(Status(Code.SUCCESS, "", name) for name in names),
        tuple(Status(Code.SUCCESS, SKIPPED, name) for name in names),
    )


@dataclass(frozen=True, init=False)
class PlacementPolicy:
    """How level 1 decides: the filter chain, the score plugins and their weights, on-prem first.

    Policy knobs live on the plugin instances. For convenience the default chains can be built with
    the knobs given here (`staleness_limit_s` on health, `strategy` on binpack, the price ceiling on
    price); pass `filters` / `scores` (registry.build_filters/build_scores, or your own plugins) to
    choose the chains instead, not both. `weights` overrides a score plugin's own weight by name.
    """

    filters: tuple[FilterPlugin, ...]
    scores: tuple[ScorePlugin, ...]
    weights: Mapping[str, int]
    prefer_onprem: bool
    # derived once per policy, for the hot path
    _passed: tuple[Status, ...] = field(repr=False, compare=False)
    _skipped: tuple[Status, ...] = field(repr=False, compare=False)
    _score_weights: tuple[int, ...] = field(repr=False, compare=False)

    def __init__(
        self,
        *,
        staleness_limit_s: float | None = None,
        strategy: str | None = None,
        weights: Mapping[str, int] | None = None,
        prefer_onprem: bool = True,
        price_ceiling_per_gpu_hour: float | None = None,
        filters: Sequence[FilterPlugin] | None = None,
        scores: Sequence[ScorePlugin] | None = None,
    ) -> None:
        if filters is None and staleness_limit_s is None:
            filters = DEFAULT_FILTERS
        elif filters is None:
            health = registry.PluginSettings(args={"staleness_limit_seconds": staleness_limit_s})
            filters = registry.build_filters({"health": health})
        elif staleness_limit_s is not None:
            raise ValueError("staleness_limit_s configures the default filters: set it on the health plugin")
        if scores is None and strategy is None and price_ceiling_per_gpu_hour is None:
            scores = DEFAULT_SCORES
        elif scores is None:
            binpack: dict[str, Any] = {}
            price: dict[str, Any] = {}
            if strategy is not None:
                if strategy not in ("binpack", "spread"):
                    raise ValueError(f"strategy: expected 'binpack' or 'spread', got {strategy!r}")
                binpack["strategy"] = strategy
            if price_ceiling_per_gpu_hour is not None:
                price["ceiling_per_gpu_hour"] = price_ceiling_per_gpu_hour
            scores = registry.build_scores(
                {
                    "binpack": registry.PluginSettings(args=binpack),
                    "price": registry.PluginSettings(args=price),
                }
            )
        elif strategy is not None or price_ceiling_per_gpu_hour is not None:
            raise ValueError("strategy / price ceiling configure the default scores: set them on the plugins")
        weights = dict(weights or {})
        filters, scores = tuple(filters), tuple(scores)
        for kind, chain in (("filter", filters), ("score", scores)):
            names = [p.name for p in chain]
            if len(set(names)) != len(names):
                raise ValueError(f"{kind} plugin names must be unique, got {names}")
        setattr_ = object.__setattr__
        setattr_(self, "filters", filters)
        setattr_(self, "scores", scores)
        setattr_(self, "weights", weights)
        setattr_(self, "prefer_onprem", prefer_onprem)
        passed, skipped = _chain_statuses(tuple(p.name for p in filters))
        setattr_(self, "_passed", passed)
        setattr_(self, "_skipped", skipped)
        setattr_(self, "_score_weights", tuple(max(0, weights.get(p.name, p.weight)) for p in scores))

    def weight(self, plugin: ScorePlugin) -> int:
        return self.weights.get(plugin.name, plugin.weight)

    @property
    def staleness_limit_s(self) -> float:
        """The health plugin's staleness limit (120 s when the chain has no health plugin)."""
        for p in self.filters:
            if isinstance(p, HealthFreshness):
                return p.staleness_limit_seconds
        return 120.0


_NO_SCORES: Mapping[str, int] = MappingProxyType({})


class ClusterVerdict(NamedTuple):
    """One cluster's evaluation: the filter statuses run (only the last can fail: the rejection, or
    the ERROR of a score plugin), the option picked, its scores and weighted total.

    An immutable record (a NamedTuple: cheap to build, one per cluster per decision); `_replace`
    makes a changed copy.
    """

    cluster: str
    tier: Tier
    statuses: tuple[Status, ...]
    option: RunOption | None = None
    scores: Mapping[str, int] = _NO_SCORES
    score: int = 0
    chosen: bool = False
    note: str = ""

    @property
    def feasible(self) -> bool:
        statuses = self.statuses
        return not statuses or statuses[-1].code is Code.SUCCESS

    @property
    def rejection(self) -> Status | None:
        statuses = self.statuses
        if not statuses or statuses[-1].code is Code.SUCCESS:
            return None
        return statuses[-1]


# --------------------------------------------------------------------------- PreFilter


def _options_key(job: JobRequest) -> tuple[Any, ...]:
    if job.wants_mig:
        return ("options", "mig", job.mig_profile, job.mig_need, job.mig_slices_per_pod)
    if job.gpus_per_pod <= 0:
        return ("options", "none")
    return ("options", "gpu", job.gpus_per_pod)


def _applies(plugin: FilterPlugin, job: PreparedJob) -> bool:
    try:
        return bool(plugin.applies(job))
    except Exception:  # let the filter itself run and report its error as a status
        return True


def prepare(job: JobRequest, policy: PlacementPolicy) -> PreparedJob:
    """PreFilter: what every cluster's evaluation of this job shares, worked out once.

    The acceptable products normalised to catalog names, the need as words, the key of the options a
    cluster offers, and the filters that apply (the others are skipped, and reported as passed).
    """
    base = PreparedJob(
        job=job,
        wanted_products=frozenset(catalog.normalise_product(p).name for p in job.gpu_products),
        need=describe_gpu_need(job),
        options_key=_options_key(job),
        filters=(),
        positions=(),
        passed=(),
    )
    applies = [_applies(p, base) for p in policy.filters]
    return PreparedJob(
        job=job,
        wanted_products=base.wanted_products,
        need=base.need,
        options_key=base.options_key,
        filters=tuple(p for p, a in zip(policy.filters, applies, strict=True) if a),
        positions=tuple(i for i, a in enumerate(applies) if a),
        passed=tuple(
            ok if a else skipped
            for ok, skipped, a in zip(policy._passed, policy._skipped, applies, strict=True)
        ),
        shape=tuple(getattr(job, f) for f in PLACEMENT_FIELDS),
    )


_NO_GPU = (RunOption(product="", memory_mib=0, resource_name="", units_per_pod=0),)


def _build_options(job: JobRequest, summary: ClusterSummary) -> tuple[RunOption, ...]:
    if job.wants_mig:
        out = []
        for m in summary.mig:
            if job.mig_profile is not None:
                if not same_profile(m.profile, job.mig_profile):
                    continue
            elif job.mig_need is not None:
                profile = catalog.mig_profile(m.product, m.profile)
                if profile is None or not catalog.profile_satisfies(profile, job.mig_need):
                    continue
            slices, memory_gb, _me = catalog.parse_profile(m.profile)
            out.append(
                RunOption(
                    product=m.product,
                    memory_mib=memory_gb * 1024,
                    resource_name=m.resource_name,
                    units_per_pod=job.mig_slices_per_pod,
                    mig_profile=m.profile,
                    compute_slices=slices,
                    mig=m,
                    gfd_products=m.gfd_products,
                    dra=m.resource_name == DRA_MIG_CLASS,
                )
            )
        return tuple(out)
    if job.gpus_per_pod <= 0:
        return _NO_GPU
    # a product served both ways gives one option per kind: a job fits when it fits one kind entirely
    # (its pods ask one way), and the option chosen carries the kind level 2 writes (Placement.dra)
    return tuple(
        RunOption(
            product=k.product,
            memory_mib=p.memory_mib,
            resource_name=GPU,
            units_per_pod=job.gpus_per_pod,
            capacity=k,
            gfd_products=k.gfd_products,
            dra=k.dra,
        )
        for p in summary.products
        if p.allocatable > 0 or p.nodes > 0
        for k in (p.kinds or (p,))
        if k is p or k.allocatable > 0 or k.nodes > 0
    )


def cluster_options(prepared: PreparedJob, summary: ClusterSummary) -> tuple[RunOption, ...]:
    """Every product/resource of a cluster that could serve the job, before any capacity check.

    MIG by name matches the profile; MIG by need takes every configured profile that meets the need
    (the smallest fitting one wins later). A job without GPUs gets one resource-less option. Built once
    per summary and job shape (the per-summary option index).
    """
    options: tuple[RunOption, ...] | None = summary.derived.get(prepared.options_key)  # memo(), inlined
    if options is None:
        options = memo(summary, prepared.options_key, _build_options, prepared.job, summary)
    return options


# --------------------------------------------------------------------------- one cluster


def _best_option(job: JobRequest, summary: ClusterSummary, options: Sequence[RunOption]) -> RunOption:
    """Inside one cluster: the smallest MIG profile, then the cheapest, then the snuggest fit, by name,
    then (one product served both ways) the DRA kind."""

    def key(o: RunOption) -> tuple[int, int, float, int, str, str, bool]:
        price = summary.price_per_gpu_hour.get(o.product, 0.0)
        return (
            o.compute_slices,
            o.memory_mib if o.mig else 0,
            price,
            -tightness(o, job),
            o.product,
            o.mig_profile or "",
            not o.dra,  # one product both ways, fitting as snugly: the claim (DRA) kind
        )

    return min(options, key=key)


def evaluate(
    prepared: PreparedJob,
    summary: ClusterSummary,
    traits: ClusterTraits | None,
    policy: PlacementPolicy,
    now: float,
) -> ClusterVerdict:
    """One cluster's verdict: the filters run (the rejection last), or the option chosen and its scores.

    A score plugin that raises makes the verdict an ERROR naming the plugin: the cluster is not chosen.
    """
    options, rejection, position = run_filters(
        prepared, summary, traits, now, cluster_options(prepared, summary)
    )
    if rejection is not None:
        return ClusterVerdict(summary.cluster, summary.tier, (*prepared.passed[:position], rejection))
    chosen = options[0] if len(options) == 1 else _best_option(prepared.job, summary, options)
    scores, total, error = run_scores(policy.scores, policy._score_weights, prepared, summary, traits, chosen)
    if error is not None:
        return ClusterVerdict(summary.cluster, summary.tier, (*prepared.passed, error), chosen, scores)
    return ClusterVerdict(summary.cluster, summary.tier, prepared.passed, chosen, scores, total)


# --------------------------------------------------------------------------- across clusters


def _winner(
    verdicts: Sequence[ClusterVerdict], policy: PlacementPolicy
) -> tuple[ClusterVerdict | None, bool]:
    """The verdict place() chooses, and whether only on-prem clusters were in the running.

    Highest score wins, ties by cluster name; with prefer_onprem a cloud cluster only when no on-prem
    cluster is feasible.
    """
    best_onprem: ClusterVerdict | None = None
    best_any: ClusterVerdict | None = None
    cloud = Tier.CLOUD
    for v in verdicts:
        statuses = v.statuses
        if statuses and statuses[-1].code is not Code.SUCCESS:
            continue  # not feasible (v.feasible, inlined: this loop runs once per cluster per decision)
        score = v.score
        if (
            best_any is None
            or score > best_any.score
            or (score == best_any.score and v.cluster < best_any.cluster)
        ):
            best_any = v
        if v.tier is not cloud and (
            best_onprem is None
            or score > best_onprem.score
            or (score == best_onprem.score and v.cluster < best_onprem.cluster)
        ):
            best_onprem = v
    if policy.prefer_onprem and best_onprem is not None:
        return best_onprem, True
    return best_any, False


def decide(
    prepared: PreparedJob, verdicts: Sequence[ClusterVerdict], policy: PlacementPolicy
) -> Placement | NoFit:
    """The best cluster for the job, or a NoFit that says why each cluster was rejected."""
    chosen, _onprem_only = _winner(verdicts, policy)
    if chosen is None or chosen.option is None:
        failures = [(v.cluster, r) for v in verdicts if (r := v.rejection) is not None]
        return build_nofit(len(verdicts), failures)
    o = chosen.option
    return Placement(
        cluster=chosen.cluster,
        product=o.product,
        resource_name=o.resource_name,
        units_per_pod=o.units_per_pod,
        pods=prepared.job.pods,
        score=chosen.score,
        scores=dict(chosen.scores),
        mig_profile=o.mig_profile,
        burst=chosen.tier is Tier.CLOUD,
        gfd_products=o.gfd_products,
        clique=o.clique,
        dra=o.dra,
    )


def annotate(verdicts: Sequence[ClusterVerdict], policy: PlacementPolicy) -> list[ClusterVerdict]:
    """Explain's view, by cluster name: the one place() chooses has chosen=True; a feasible cloud
    cluster that lost to on-prem says so in its note."""
    winner, onprem_only = _winner(verdicts, policy)
    out = []
    for v in verdicts:
        if winner is not None and v.cluster == winner.cluster:
            out.append(v._replace(chosen=True))
        elif onprem_only and v.feasible and v.tier is Tier.CLOUD:
            out.append(v._replace(note=ONPREM_PREFERRED))
        else:
            out.append(v)
    return sorted(out, key=lambda v: v.cluster)


def _evaluate_all(
    job: JobRequest,
    summaries: Sequence[ClusterSummary],
    traits: Mapping[str, ClusterTraits],
    policy: PlacementPolicy,
    now: float,
) -> tuple[PreparedJob, list[ClusterVerdict]]:
    prepared = prepare(job, policy)
    return prepared, [evaluate(prepared, s, traits.get(s.cluster), policy, now) for s in summaries]


def explain(
    job: JobRequest,
    summaries: Sequence[ClusterSummary],
    traits: Mapping[str, ClusterTraits],
    policy: PlacementPolicy,
    now: float,
) -> list[ClusterVerdict]:
    """Every cluster's verdict, by cluster name; the one place() would choose has chosen=True."""
    _prepared, verdicts = _evaluate_all(job, summaries, traits, policy, now)
    return annotate(verdicts, policy)


def explain_and_decide(
    job: JobRequest,
    summaries: Sequence[ClusterSummary],
    traits: Mapping[str, ClusterTraits],
    policy: PlacementPolicy,
    now: float,
) -> tuple[Placement | NoFit, list[ClusterVerdict]]:
    """place() and explain() together, each cluster evaluated once (the dry-run endpoint's need)."""
    prepared, verdicts = _evaluate_all(job, summaries, traits, policy, now)
    return decide(prepared, verdicts, policy), annotate(verdicts, policy)


def place(
    job: JobRequest,
    summaries: Sequence[ClusterSummary],
    traits: Mapping[str, ClusterTraits],
    policy: PlacementPolicy,
    now: float,
) -> Placement | NoFit:
    """Level 1: the best cluster for the job, or a NoFit that says why each cluster was rejected."""
    prepared, verdicts = _evaluate_all(job, summaries, traits, policy, now)
    return decide(prepared, verdicts, policy)
