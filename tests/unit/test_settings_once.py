"""Settings live in one model (issue 43): clusters.yaml's `Settings` (broker.config) declares every default.
The plain frozen values the lower packages read (the control loop's ServiceSettings, the burst gate's
BurstSettings, pools, tenants and burst-back, the mass-loss, member-trouble and preemption policies) are
built from it in broker.config; built from a default `Settings`, each equals the plain value's own
defaults, so a default changed in one place and not the other fails here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from broker.burst.burst_back import BurstBackSettings
from broker.burst.settings import BurstSettings, PoolSettings, TenantBurst
from broker.config.burst import BurstConfig
from broker.config.service_settings import service_settings
from broker.config.settings import PreemptionConfig, Settings
from broker.controller.base import ServiceSettings
from broker.health.failover import MassLossPolicy
from broker.scheduler.preemption import PreemptionPolicy
from broker.workload.member_trouble import TroublePolicy

# ServiceSettings fields that are wiring, not tunables: None there means "not configured" (no federation
# prefix on the Jobs, no queue policy beyond priorities, nobody preempts), set by service_settings.
WIRING = {"federation", "queue", "preemption", "priorities"}


def _tunables(value: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.name not in skip}


DERIVED = [
    pytest.param(
        lambda: service_settings(Settings()), ServiceSettings(), frozenset(WIRING), id="ServiceSettings"
    ),
    pytest.param(
        lambda: service_settings(Settings()).mass_loss, MassLossPolicy(), frozenset(), id="MassLoss"
    ),
    pytest.param(
        lambda: service_settings(Settings()).trouble_policy, TroublePolicy(), frozenset(), id="Trouble"
    ),
    pytest.param(Settings().burst.settings, BurstSettings(), frozenset(), id="BurstSettings"),
    pytest.param(
        lambda: Settings().burst.settings().burst_back,
        BurstBackSettings(),
        frozenset(),
        id="BurstBackSettings",
    ),
    pytest.param(
        lambda: BurstConfig.model_validate({"pools": {"cloud": {}}}).settings().pools["cloud"],
        PoolSettings(),
        frozenset(),
        id="PoolSettings",
    ),
    pytest.param(
        lambda: BurstConfig.model_validate({"tenants": {"ml": {}}}).settings().tenants["ml"],
        TenantBurst(),
        frozenset(),
        id="TenantBurst",
    ),
    pytest.param(lambda: PreemptionConfig().policy(), PreemptionPolicy(), frozenset(), id="PreemptionPolicy"),
]


@pytest.mark.parametrize(("derive", "plain", "skip"), DERIVED)
def test_a_default_settings_model_gives_the_plain_values_defaults(
    derive: Any, plain: Any, skip: frozenset[str]
) -> None:
    assert _tunables(derive(), skip) == _tunables(plain, skip)


def test_a_changed_setting_reaches_the_plain_value() -> None:
    """The derivation reads the model (not the plain value's default): a changed setting is seen."""
    settings = Settings.model_validate(
        {
            "clusterLostSeconds": 42,
            "memberAvoidSeconds": 7,
            "massLossMinClusters": 3,
            "burst": {"maxWaitSeconds": 9},
        }
    )
    derived = service_settings(settings)
    assert derived.cluster_lost_seconds == 42
    assert derived.trouble_policy.avoid_seconds == 7
    assert derived.mass_loss.min_clusters == 3
    assert settings.burst.settings().max_wait_seconds == 9
