"""settings.burst (broker.burst.settings): every bad field named; max wait job > tenant > fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.burst.spend import Budget, Period
from broker.config.burst import BurstConfig
from broker.config.settings import parse_fleet_config
from broker.core.errors import ConfigError


@pytest.mark.parametrize(
    ("burst", "message"),
    [
        (
            {"tenants": {"ml": {"budget": {"amount": -1}}}},
            "settings.burst.tenants.ml.budget.amount: Input should be greater than or equal to 0",
        ),
        (
            {"tenants": {"ml": {"budget": {"amount": 5, "period": "year"}}}},
            "settings.burst.tenants.ml.budget.period: Input should be 'day', 'week' or 'month'",
        ),
        (
            {"tenants": {"ML_team": {}}},
            "settings.burst.tenants: Value error, 'ML_team': a tenant name is a DNS label",
        ),
        (
            {"pools": {"c": {"minNodes": 3, "maxNodes": 1}}},
            "settings.burst.pools.c: Value error, minNodes (3) must not exceed maxNodes (1)",
        ),
        (
            {"pools": {"c": {"maxNodes": 2}}},
            "settings.burst.pools.c: Value error, product: a pool that scales up names the GPU product of its nodes",
        ),
        ({"maxWaitSeconds": -5}, "settings.burst.maxWaitSeconds: Input should be greater than or equal to 0"),
        ({"maxWaitSeconds": "inf"}, "settings.burst.maxWaitSeconds: Input should be a finite number"),
        ({"bogus": 1}, "settings.burst.bogus: Extra inputs are not permitted"),
        ({"simulationSpeed": 0}, "settings.burst.simulationSpeed: Input should be greater than 0"),
    ],
    ids=[
        "negative-budget",
        "unknown-period",
        "tenant-name",
        "min-over-max",
        "pool-product",
        "negative-wait",
        "infinite-wait",
        "unknown-field",
        "simulation-speed",
    ],
)
def test_bad_burst_settings_name_the_field(burst: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_fleet_config({"clusters": [], "settings": {"burst": burst}}, "fleet.yaml", Path("."))
    assert str(err.value) in (f"fleet.yaml: {message}", f"fleet.yaml: {message.replace('Value error, ', '')}")


def test_max_wait_is_the_jobs_then_the_tenants_then_the_fleets() -> None:
    settings = BurstConfig.model_validate(
        {
            "maxWaitSeconds": 600,
            "tenants": {"ml": {"maxWaitSeconds": 300, "budget": {"amount": 200, "period": "week"}}},
        }
    ).settings()
    assert settings.max_wait("ml", 60.0) == 60.0
    assert settings.max_wait("ml", None) == 300.0
    assert settings.max_wait("cv", None) == 600.0
    assert settings.budgets() == {"ml": Budget(200.0, Period.WEEK)}
    assert BurstConfig().settings().max_wait("any", None) == 0.0  # default: burst once nothing fits


def test_a_budget_is_soft_unless_it_says_hard() -> None:
    settings = BurstConfig.model_validate(
        {
            "tenants": {
                "ml": {"budget": {"amount": 50, "period": "day", "hard": True}},
                "cv": {"budget": {"amount": 50}},
            }
        }
    ).settings()
    assert settings.budgets() == {"ml": Budget(50.0, Period.DAY, hard=True), "cv": Budget(50.0, Period.MONTH)}
    with pytest.raises(
        ConfigError, match=r"settings.burst.tenants.ml.budget.hard: Input should be a valid boolean"
    ):
        parse_fleet_config(
            {
                "clusters": [],
                "settings": {"burst": {"tenants": {"ml": {"budget": {"amount": 5, "hard": "very"}}}}},
            },
            "fleet.yaml",
            Path("."),
        )


def test_the_demo_tells_the_broker_its_simulations_speed(tmp_path: Path) -> None:
    """gpufed demo runs kubesim at x20: its config says so, and predictions divide simulated
    durationSeconds by it (broker.burst.wait_prediction), so they are wall-clock time (issue 45)."""
    import yaml

    from broker.app.demo import demo_settings, write_demo_config

    kubeconfigs = {n: tmp_path / f"{n}.kubeconfig" for n in ("onprem-a", "onprem-b", "cloud-burst")}
    path = write_demo_config(tmp_path, kubeconfigs, "redis://127.0.0.1:1/0", "p", demo_settings(20.0))
    burst = yaml.safe_load(path.read_text())["settings"]["burst"]
    assert BurstConfig.model_validate(burst).settings().simulation_speed == 20.0
    assert BurstConfig().settings().simulation_speed == 1.0  # real clusters: durationSeconds is wall-clock
