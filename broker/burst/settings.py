"""The burst gate's settings as plain frozen values: wait-or-burst thresholds, tenant budgets, cloud pools and
burst-back (docs/burst.md). They are built from clusters.yaml's `settings.burst` by
broker.config.burst.BurstConfig.settings(), where every default is declared; the defaults here are the
same values, for tests and tools that build one by hand (tests/unit/test_settings_once.py holds them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.burst.burst_back import BurstBackSettings
from broker.burst.spend import Budget

__all__ = ["BurstSettings", "PoolSettings", "TenantBurst"]


@dataclass(frozen=True)
class TenantBurst:
    max_wait_seconds: float | None = None
    budget: Budget | None = None


@dataclass(frozen=True)
class PoolSettings:
    provisioning_delay_seconds: float = 0.0
    min_nodes: int = 0
    max_nodes: int = 0
    gpus_per_node: int = 8
    product: str | None = None
    interruptions_per_hour: float = 0.0


@dataclass(frozen=True)
class BurstSettings:
    max_wait_seconds: float = 0.0
    default_run_seconds: float = 3600.0
    simulation_speed: float = 1.0  # simulated seconds per wall-clock second (BurstConfig.simulation_speed)
    tenants: Mapping[str, TenantBurst] = field(default_factory=dict)
    pools: Mapping[str, PoolSettings] = field(default_factory=dict)
    burst_back: BurstBackSettings = field(default_factory=BurstBackSettings)

    def max_wait(self, tenant: str, own: float | None) -> float:
        """The job's own maxWaitSeconds, else its tenant's, else the fleet's."""
        if own is not None:
            return own
        t = self.tenants.get(tenant)
        if t is not None and t.max_wait_seconds is not None:
            return t.max_wait_seconds
        return self.max_wait_seconds

    def budgets(self) -> dict[str, Budget]:
        return {n: t.budget for n, t in self.tenants.items() if t.budget is not None}
