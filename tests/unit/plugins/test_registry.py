"""The plugin registry: every plugin named in chain order with its defaults; overrides enable, disable,
weight and configure them; PlacementPolicy is built from it."""

from __future__ import annotations

import pytest

from broker.core.model import JobRequest, NoFit, Placement
from broker.scheduler import placement
from broker.scheduler.placement import PlacementPolicy, place
from broker.scheduler.plugins import registry
from broker.scheduler.plugins.binpack import BinPackScore
from broker.scheduler.plugins.health import HealthFreshness
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import NOW, h100

JOB = JobRequest("j", gpus_per_pod=2)


def test_the_registry_names_every_plugin_in_chain_order_with_defaults() -> None:
    assert [s.name for s in registry.FILTERS] == [
        "health",
        "allowlist",
        "burst",
        "workload-kind",
        "gpu-product",
        "gpu-fit",
        "mig-fit",
        "numa-fit",
        "nvlink-clique",
        "price-cap",
        "kueue",
        "namespace-quota",
    ]
    assert {s.name: s.default_weight for s in registry.SCORES} == {
        "binpack": 2,
        "price": 1,
        "queue": 1,
        "nvlink-clique": 2,
        "gpu-reliability": 1,
    }
    assert registry.spec("score", "binpack") is not None
    assert registry.spec("score", "binpack").args == ("strategy",)  # type: ignore[union-attr]
    assert registry.spec("filter", "health").args == ("staleness_limit_seconds",)  # type: ignore[union-attr]
    assert [p.name for p in placement.DEFAULT_FILTERS] == [s.name for s in registry.FILTERS]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"nope": registry.PluginSettings()}, "unknown filter plugin 'nope'"),
        ({"health": registry.PluginSettings(weight=2)}, "filter plugin 'health' takes no weight"),
        ({"health": registry.PluginSettings(args={"x": 1})}, "filter plugin 'health' has no arg 'x'"),
    ],
)
def test_bad_overrides_are_refused(overrides: dict[str, registry.PluginSettings], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        registry.build_filters(overrides)


def test_overrides_disable_weight_and_configure_plugins() -> None:
    filters = registry.build_filters(
        {
            "numa-fit": registry.PluginSettings(enabled=False),
            "health": registry.PluginSettings(args={"staleness_limit_seconds": 5.0}),
        }
    )
    assert "numa-fit" not in [f.name for f in filters]
    assert HealthFreshness(staleness_limit_seconds=5.0) in filters
    scores = registry.build_scores(
        {"binpack": registry.PluginSettings(weight=7, args={"strategy": "spread"})}
    )
    assert BinPackScore(weight=7, strategy="spread") in scores


def test_policy_knobs_configure_the_default_plugins_and_are_not_mixed_with_explicit_chains() -> None:
    policy = PlacementPolicy(staleness_limit_s=30.0, strategy="spread")
    assert policy.staleness_limit_s == 30.0
    assert BinPackScore(strategy="spread") in policy.scores
    with pytest.raises(ValueError, match="strategy"):
        PlacementPolicy(strategy="scatter")
    with pytest.raises(ValueError, match="health plugin"):
        PlacementPolicy(staleness_limit_s=30.0, filters=registry.build_filters())


def test_a_cluster_without_any_option_is_rejected_even_without_the_product_filter() -> None:
    policy = PlacementPolicy(
        filters=registry.build_filters({"gpu-product": registry.PluginSettings(enabled=False)})
    )
    result = place(JOB, [summary("cpu-only")], {}, policy, NOW)
    assert isinstance(result, NoFit) and result.message == "0/1 clusters are available: 1 no GPUs."
    assert result.rejections[0].plugin == "options" and result.never_fits


def test_a_plugin_name_appears_once_per_chain() -> None:
    with pytest.raises(ValueError, match="filter plugin names must be unique"):
        PlacementPolicy(filters=(HealthFreshness(), HealthFreshness(staleness_limit_seconds=1.0)))


def test_a_disabled_filter_no_longer_rejects() -> None:
    stale = summary("a", h100(8), heartbeat=0.0)
    without_health = PlacementPolicy(
        filters=registry.build_filters({"health": registry.PluginSettings(enabled=False)})
    )
    assert isinstance(place(JOB, [stale], {}, PlacementPolicy(), NOW), NoFit)
    assert isinstance(place(JOB, [stale], {}, without_health, NOW), Placement)
