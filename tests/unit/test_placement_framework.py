"""The level-1 framework: PreFilter once, read-only filters, plugin errors as errors, one evaluation per
cluster for a dry run, and never-fit verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import pytest

from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, NoFit, Placement, Tier
from broker.scheduler import placement
from broker.scheduler.framework import SUCCESS, Code, FilterResult, PreparedJob, RunOption, Status
from broker.scheduler.placement import (
    PlacementPolicy,
    cluster_options,
    explain,
    explain_and_decide,
    place,
    prepare,
)
from broker.scheduler.plugins import registry
from broker.scheduler.plugins.binpack import BinPackScore
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import NOW, h100, l4

JOB = JobRequest("j", gpus_per_pod=2)


@dataclass(frozen=True)
class Counting:
    """A filter that lets everything through and records which clusters it saw."""

    name: ClassVar[str] = "counting"
    seen: list[str] = field(default_factory=list)

    def applies(self, job: PreparedJob) -> bool:
        return True

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        self.seen.append(summary.cluster)
        return options


@dataclass(frozen=True)
class Emptying:
    name: ClassVar[str] = "emptying"

    def applies(self, job: PreparedJob) -> bool:
        return True

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        return []


@dataclass(frozen=True)
class BrokenScore:
    """Raises on the clusters named, scores 100 elsewhere."""

    name: ClassVar[str] = "broken-score"
    weight: int = 1
    on: tuple[str, ...] = ()

    def score(
        self, job: PreparedJob, summary: ClusterSummary, traits: ClusterTraits | None, option: RunOption
    ) -> int:
        if summary.cluster in self.on:
            raise ZeroDivisionError("division by zero")
        return 100


def test_a_score_plugin_that_raises_is_an_error_for_that_cluster_not_a_zero() -> None:
    policy = PlacementPolicy(scores=(BinPackScore(), BrokenScore(on=("a-best",))))
    best, other = summary("a-best", h100(2)), summary("b-other", h100(8))  # binpack prefers a-best
    p = place(JOB, [best, other], {}, policy, NOW)
    assert isinstance(p, Placement) and p.cluster == "b-other"
    verdicts = {v.cluster: v for v in explain(JOB, [best, other], {}, policy, NOW)}
    rejection = verdicts["a-best"].rejection
    assert not verdicts["a-best"].feasible and rejection is not None
    assert (rejection.code, rejection.plugin, rejection.reason) == (
        Code.ERROR,
        "broken-score",
        "broken-score failed: ZeroDivisionError: division by zero",
    )
    nofit = place(JOB, [best], {}, policy, NOW)
    assert isinstance(nofit, NoFit)
    assert nofit.message == (
        "0/1 clusters are available: 1 broken-score failed: ZeroDivisionError: division by zero."
    )
    assert not nofit.never_fits  # an error may go away


def test_a_filter_that_narrows_to_nothing_without_a_status_is_an_error() -> None:
    policy = PlacementPolicy(filters=[Emptying()])
    result = place(JOB, [summary("a", h100(8))], {}, policy, NOW)
    assert isinstance(result, NoFit)
    (r,) = result.rejections
    assert (r.code, r.plugin) == (Code.ERROR, "emptying")


def test_explain_and_decide_evaluates_each_cluster_once() -> None:
    counting = Counting()
    policy = PlacementPolicy(filters=(counting, *registry.build_filters()))
    fleet = [summary("c", h100(8)), summary("a", h100(2)), summary("b", h100(1))]
    decision, verdicts = explain_and_decide(JOB, fleet, {}, policy, NOW)
    assert sorted(counting.seen) == ["a", "b", "c"]  # once each, for the decision and the verdicts
    assert isinstance(decision, Placement) and decision.cluster == "a"
    assert [v.cluster for v in verdicts if v.chosen] == ["a"]
    assert decision == place(JOB, fleet, {}, policy, NOW)
    assert verdicts == explain(JOB, fleet, {}, policy, NOW)


@pytest.mark.parametrize(
    ("job", "fleet", "never_fits"),
    [
        # wrong product everywhere, burst not allowed: nothing freeing up helps
        (
            JobRequest("j", gpus_per_pod=1, gpu_products=("A100-80GB",)),
            [summary("a", h100(8)), summary("c", h100(8), tier=Tier.CLOUD)],
            True,
        ),
        # one cluster is only full: capacity may free up
        (
            JobRequest("j", gpus_per_pod=8, gpu_products=("H100-80GB",)),
            [summary("a", l4(4)), summary("b", h100(4))],
            False,
        ),
        # a stale cluster may come back
        (JobRequest("j", gpus_per_pod=1), [summary("a", h100(8), heartbeat=0.0)], False),
        (JobRequest("j", gpus_per_pod=1, clusters=("x",)), [summary("a", h100(8))], True),
        (JobRequest("j", gpus_per_pod=1), [], True),  # no clusters at all: only a fleet change helps
    ],
)
def test_never_fits_only_when_every_rejection_is_unresolvable(
    job: JobRequest, fleet: list[ClusterSummary], never_fits: bool
) -> None:
    result = place(job, fleet, {}, PlacementPolicy(), NOW)
    assert isinstance(result, NoFit)
    assert result.never_fits is never_fits


def test_skipped_filters_are_reported_as_passed_and_name_themselves() -> None:
    (v,) = explain(JOB, [summary("a", h100(8))], {}, PlacementPolicy(), NOW)
    assert v.feasible and [s.plugin for s in v.statuses] == [s.name for s in registry.FILTERS]
    skipped = {s.plugin for s in v.statuses if s.reason.startswith("skipped")}
    assert skipped == {"allowlist", "workload-kind", "mig-fit", "numa-fit", "nvlink-clique", "price-cap"}
    assert all(s.is_success for s in v.statuses)


def test_prepare_normalises_products_once_and_keeps_only_filters_that_apply() -> None:
    job = JobRequest("j", gpus_per_pod=1, gpu_products=("NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"))
    prepared = prepare(job, PlacementPolicy())
    assert prepared.wanted_products == frozenset({"H100-80GB", "L4"})
    assert prepared.need == "GPUs"
    assert [f.name for f in prepared.filters] == [
        "health",
        "burst",
        "gpu-product",
        "gpu-fit",
        "kueue",
        "namespace-quota",
    ]
    assert [prepared.passed[i].plugin for i in prepared.positions] == [f.name for f in prepared.filters]


def test_jobs_of_one_shape_get_the_same_verdicts() -> None:
    fleet = [summary("a", h100(8)), summary("b", h100(2)), summary("c", h100(1))]
    policy = PlacementPolicy()
    one = JobRequest("one", tenant="x", image="a:1", gpus_per_pod=2, labels={"team": "a"})
    other = JobRequest("other", tenant="x", image="b:2", gpus_per_pod=2, command=("sleep", "1"))
    p1, p2 = prepare(one, policy), prepare(other, policy)
    assert p1.shape == p2.shape and hash(p1.shape) == hash(p2.shape)
    assert [placement.evaluate(p1, s, None, policy, NOW) for s in fleet] == [
        placement.evaluate(p2, s, None, policy, NOW) for s in fleet
    ]
    # the tenant's namespace quota and limits are read too (namespace-quota): tenants do not share verdicts
    for change in (
        {"pods": 2},
        {"gpu_products": ("L4",)},
        {"allow_burst": True},
        {"clusters": ("a",)},
        {"tenant": "y"},
        {"cpu_millis_per_pod": 4000},
    ):
        assert prepare(replace(one, **change), policy).shape != p1.shape


def test_options_are_built_once_per_summary_and_job_shape() -> None:
    s = summary("a", h100(8), l4(4))
    first = cluster_options(prepare(JOB, PlacementPolicy()), s)
    again = cluster_options(prepare(JobRequest("other", gpus_per_pod=2, pods=3), PlacementPolicy()), s)
    assert again is first and [o.product for o in first] == ["H100-80GB", "L4"]
    assert cluster_options(prepare(JobRequest("j", gpus_per_pod=4), PlacementPolicy()), s) is not first


def test_a_filter_returning_success_keeps_the_options() -> None:
    @dataclass(frozen=True)
    class Yes:
        name: ClassVar[str] = "yes"

        def applies(self, job: PreparedJob) -> bool:
            return True

        def filter(
            self,
            job: PreparedJob,
            summary: ClusterSummary,
            traits: ClusterTraits | None,
            now: float,
            options: Sequence[RunOption],
        ) -> FilterResult:
            return SUCCESS

    p = place(JOB, [summary("a", h100(8))], {}, PlacementPolicy(filters=[Yes()]), NOW)
    assert isinstance(p, Placement) and p.product == "H100-80GB"


def test_status_success_is_one_shared_object() -> None:
    assert Status.success() is SUCCESS and SUCCESS.is_success
