"""settings.burst of the cluster config: wait-or-burst thresholds, tenant budgets, cloud pools (docs/burst.md).

Owns the pydantic models of that section (part of clusters.yaml's one settings model, broker.config) and
their translation into the plain settings the burst gate reads (broker.burst.settings.BurstSettings):
every default is declared here once. Every error names the field:

    settings:
      burst:
        maxWaitSeconds: 600            # a job that allows burst waits at most this long (its own
                                       # maxWaitSeconds wins; 0 = burst as soon as nothing fits on-prem)
        defaultRunSeconds: 3600        # expected run time when nothing is known of a job's shape
        tenants:
          ml-research:
            maxWaitSeconds: 300
            budget: {amount: 200, period: month}     # day | week | month (UTC)
            burstBack: never           # auto (the default: checkpointing jobs) | never
        pools:                         # cloud clusters: what the decision needs beyond the price
          cloud-burst: {provisioningDelaySeconds: 90, minNodes: 0, maxNodes: 4, gpusPerNode: 8,
                        product: L4, interruptionsPerHour: 0.5}
        burstBack:                     # moving cloud jobs back on-prem (broker.burst.burst_back)
          policy: auto                 # the tenants' default: auto | never
          intervalSeconds: 30          # at most one evaluation this often, and only after a change
          freeForSeconds: 300          # on-prem GPUs must have been free this long
          cooldownSeconds: 1800        # a job moved is not moved again this soon
          minSavingDollars: 1          # the least expected saving worth a move
          minRemainingRatio: 4         # time left >= this x the restart cost (grace + lost + startup)
          startupSeconds: 60           # start-up on-prem, counted in the restart cost
          moveWithoutCheckpoint: false # true: also move jobs that do not checkpoint (from scratch)
          keepFreeGpus: 0              # GPUs of each on-prem pool left free for what arrives next
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from broker.burst.burst_back import BurstBackPolicy, BurstBackSettings
from broker.burst.settings import BurstSettings, PoolSettings, TenantBurst
from broker.burst.spend import Budget, Period

__all__ = ["BurstConfig"]

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MAX_WAIT_LIMIT = 30 * 86400.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class BudgetConfig(_Strict):
    amount: float = Field(ge=0, le=1e9, allow_inf_nan=False)
    period: Period = Period.MONTH
    # true: once spent, the tenant's running cloud jobs are stopped and requeued (docs/burst.md)
    hard: bool = False


class TenantBurstConfig(_Strict):
    max_wait_seconds: float | None = Field(
        default=None, alias="maxWaitSeconds", ge=0, le=MAX_WAIT_LIMIT, allow_inf_nan=False
    )
    budget: BudgetConfig | None = None
    burst_back: BurstBackPolicy | None = Field(default=None, alias="burstBack")


class BurstBackConfig(_Strict):
    policy: BurstBackPolicy = BurstBackPolicy.AUTO
    interval_seconds: float = Field(
        default=30.0, alias="intervalSeconds", ge=0, le=86400, allow_inf_nan=False
    )
    free_for_seconds: float = Field(
        default=300.0, alias="freeForSeconds", ge=0, le=86400, allow_inf_nan=False
    )
    cooldown_seconds: float = Field(
        default=1800.0, alias="cooldownSeconds", ge=0, le=MAX_WAIT_LIMIT, allow_inf_nan=False
    )
    min_saving_dollars: float = Field(
        default=1.0, alias="minSavingDollars", ge=0, le=1e9, allow_inf_nan=False
    )
    min_remaining_ratio: float = Field(
        default=4.0, alias="minRemainingRatio", ge=0, le=1000, allow_inf_nan=False
    )
    startup_seconds: float = Field(default=60.0, alias="startupSeconds", ge=0, le=86400, allow_inf_nan=False)
    move_without_checkpoint: bool = Field(default=False, alias="moveWithoutCheckpoint")
    keep_free_gpus: int = Field(default=0, alias="keepFreeGpus", ge=0, le=100_000)


class PoolConfig(_Strict):
    provisioning_delay_seconds: float = Field(
        default=0.0, alias="provisioningDelaySeconds", ge=0, le=86400, allow_inf_nan=False
    )
    min_nodes: int = Field(default=0, alias="minNodes", ge=0, le=100_000)
    max_nodes: int = Field(default=0, alias="maxNodes", ge=0, le=100_000)
    gpus_per_node: int = Field(default=8, alias="gpusPerNode", ge=1, le=64)
    product: str | None = None  # the GPU product its nodes carry (catalog name)
    interruptions_per_hour: float = Field(
        default=0.0, alias="interruptionsPerHour", ge=0, le=100, allow_inf_nan=False
    )

    @model_validator(mode="after")
    def _min_le_max(self) -> PoolConfig:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"minNodes ({self.min_nodes}) must not exceed maxNodes ({self.max_nodes})")
        if self.max_nodes and not self.product:
            raise ValueError("product: a pool that scales up names the GPU product of its nodes")
        return self


class BurstConfig(_Strict):
    max_wait_seconds: float = Field(
        default=0.0, alias="maxWaitSeconds", ge=0, le=MAX_WAIT_LIMIT, allow_inf_nan=False
    )
    default_run_seconds: float = Field(
        default=3600.0, alias="defaultRunSeconds", gt=0, le=MAX_WAIT_LIMIT, allow_inf_nan=False
    )
    # Simulated members (kubesim, gpufed demo): simulated seconds per wall-clock second. A job's
    # durationSeconds is simulated time there, so its wall-clock run is durationSeconds / this; predicted
    # starts stay wall-clock, as the ages shown beside them. 1 on real clusters.
    simulation_speed: float = Field(default=1.0, alias="simulationSpeed", gt=0, le=1e6, allow_inf_nan=False)
    tenants: dict[str, TenantBurstConfig] = Field(default_factory=dict)
    pools: dict[str, PoolConfig] = Field(default_factory=dict)
    burst_back: BurstBackConfig = Field(default_factory=BurstBackConfig, alias="burstBack")

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, v: dict[str, TenantBurstConfig]) -> dict[str, TenantBurstConfig]:
        for name in v:
            if not re.match(_DNS_LABEL, name):
                raise ValueError(f"{name!r}: a tenant name is a DNS label")
        return v

    def settings(self) -> BurstSettings:
        return BurstSettings(
            max_wait_seconds=self.max_wait_seconds,
            default_run_seconds=self.default_run_seconds,
            simulation_speed=self.simulation_speed,
            tenants={
                n: TenantBurst(
                    t.max_wait_seconds,
                    Budget(t.budget.amount, t.budget.period, t.budget.hard) if t.budget else None,
                )
                for n, t in self.tenants.items()
            },
            pools={
                n: PoolSettings(
                    p.provisioning_delay_seconds,
                    p.min_nodes,
                    p.max_nodes,
                    p.gpus_per_node,
                    p.product,
                    p.interruptions_per_hour,
                )
                for n, p in self.pools.items()
            },
            burst_back=self._burst_back(),
        )

    def _burst_back(self) -> BurstBackSettings:
        b = self.burst_back
        return BurstBackSettings(
            policy=b.policy,
            interval_seconds=b.interval_seconds,
            free_for_seconds=b.free_for_seconds,
            cooldown_seconds=b.cooldown_seconds,
            min_saving_dollars=b.min_saving_dollars,
            min_remaining_ratio=b.min_remaining_ratio,
            startup_seconds=b.startup_seconds,
            move_without_checkpoint=b.move_without_checkpoint,
            keep_free_gpus=b.keep_free_gpus,
            tenants={n: t.burst_back for n, t in self.tenants.items() if t.burst_back is not None},
        )
