"""Spend and budgets: what each tenant's cloud runs cost, and what is left of its budget (docs/burst.md).

Pure (no I/O, no clock). Owns:

- `Run` (broker.core.records): one finished (or interrupted) attempt on a priced cluster, with its run time as the broker saw
  it in the member cluster (pods running -> the Job ended) and the price per GPU-hour it ran at.
  cost = price x GPUs x run seconds / 3600, exactly.
- Budget periods: "day", "week" (from Monday 00:00 UTC) and "month" (from the 1st, 00:00 UTC),
  computed from epoch seconds with civil-calendar arithmetic (no datetime in the core).
- A period's spend is the part of each run that falls inside it: a run that crosses into a new day
  (week, month) is charged to each for the time it ran in it, as a cloud bill is.
- `budget_left`: the budget less the period's settled spend, less what the tenant's cloud jobs still
  running are expected to cost in all (so many bursts at once cannot overshoot the budget together).
- `avoided`: the cloud cost burst-back moves are expected to avoid in the period (broker.burst.burst_back's
  Savings, counted when the move is made), beside the spend.
- `hard_budget_stops`: with a hard budget, the cloud runs to stop now: every one of the tenant's, once
  what its period's settled runs cost plus what its running ones have run up so far reaches the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from broker.core.records import Run, Saving

__all__ = [
    "Budget",
    "BudgetStop",
    "Period",
    "Run",
    "RunningCost",
    "TenantSpend",
    "budget_left",
    "hard_budget_stops",
    "period_start",
    "spend_by_tenant",
]

DAY = 86400.0


class Period(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


@dataclass(frozen=True)
class Budget:
    amount: float  # in the currency of the prices (the docs say $)
    period: Period = Period.MONTH
    # hard: once spent (settled + run up by the running cloud jobs), those jobs are stopped and requeued;
    # soft (default): only new bursts are refused, and runs already started may overrun the budget
    hard: bool = False


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a count of days since 1970-01-01 (proleptic Gregorian)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month, day


def period_start(now: float, period: Period) -> float:
    """Epoch seconds at which the period holding `now` began (UTC)."""
    days = int(now // DAY)
    if period is Period.DAY:
        return days * DAY
    if period is Period.WEEK:
        return (days - (days + 3) % 7) * DAY  # 1970-01-01 was a Thursday
    _, _, day = _civil(days)
    return (days - (day - 1)) * DAY


@dataclass(frozen=True)
class TenantSpend:
    tenant: str
    spent: float  # settled runs that ended in this period
    gpu_hours: float
    runs: int
    committed: float  # expected cost of its cloud jobs still running
    budget: Budget | None
    period_start: float
    avoided: float = 0.0  # cloud cost burst-back moves are expected to avoid this period (est.)
    moved_back: int = 0  # burst-back moves this period

    @property
    def left(self) -> float | None:
        if self.budget is None:
            return None
        return self.budget.amount - self.spent - self.committed

    @property
    def over(self) -> bool:
        left = self.left
        return left is not None and left <= 0


def spend_by_tenant(
    runs: Iterable[Run],
    budgets: Mapping[str, Budget],
    now: float,
    committed: Mapping[str, float] | None = None,
    default_period: Period = Period.MONTH,
    savings: Iterable[Saving] = (),
) -> dict[str, TenantSpend]:
    """Each tenant's spend in its current period (its budget's, else `default_period`), with what
    burst-back saved it in that period (`savings`)."""
    runs = list(runs)
    savings = list(savings)
    committed = committed or {}
    tenants = {r.tenant for r in runs} | set(budgets) | set(committed) | {s.tenant for s in savings}
    out: dict[str, TenantSpend] = {}
    for t in sorted(tenants):
        budget = budgets.get(t)
        since = period_start(now, budget.period if budget else default_period)
        mine = [r for r in runs if r.tenant == t and r.ended_at >= since]
        saved = [s for s in savings if s.tenant == t and s.at >= since]
        out[t] = TenantSpend(
            tenant=t,
            spent=sum(r.cost_since(since) for r in mine),
            gpu_hours=sum(r.gpu_hours_since(since) for r in mine),
            runs=len(mine),
            committed=committed.get(t, 0.0),
            budget=budget,
            period_start=since,
            avoided=sum(s.dollars for s in saved),
            moved_back=len(saved),
        )
    return out


def budget_left(spend: Mapping[str, TenantSpend], tenant: str) -> float | None:
    s = spend.get(tenant)
    return None if s is None else s.left


@dataclass(frozen=True)
class RunningCost:
    """A job placed on a priced cluster: what it costs per hour, and since when (None: not running yet)."""

    job_id: str
    tenant: str
    dollars_per_hour: float  # price per GPU-hour x GPUs
    started_at: float | None

    def run_up(self, since: float, now: float) -> float:
        """What it has cost from `since` (its period's start) to `now`."""
        if self.started_at is None:
            return 0.0
        return self.dollars_per_hour * max(0.0, now - max(self.started_at, since)) / 3600


@dataclass(frozen=True)
class BudgetStop:
    """A tenant whose hard budget is spent: the runs to stop, and the figures for their reason."""

    tenant: str
    job_ids: tuple[str, ...]
    spent: float  # settled + run up so far
    budget: Budget

    @property
    def reason(self) -> str:
        return (
            f"hard budget: tenant {self.tenant} has spent ${self.spent:.2f} of ${self.budget.amount:.2f} "
            f"this {self.budget.period}; its cloud run stopped"
        )


def hard_budget_stops(
    spend: Mapping[str, TenantSpend], running: Iterable[RunningCost], now: float
) -> list[BudgetStop]:
    """The tenants with a hard budget whose period's settled spend plus what their running cloud jobs have
    run up in the period reaches the budget, each with all of its jobs on priced clusters (all of them:
    every one that kept running would go on adding to a budget already spent)."""
    by_tenant: dict[str, list[RunningCost]] = {}
    for r in running:
        by_tenant.setdefault(r.tenant, []).append(r)
    stops = []
    for tenant, runs in sorted(by_tenant.items()):
        s = spend.get(tenant)
        if s is None or s.budget is None or not s.budget.hard:
            continue
        spent = s.spent + sum(r.run_up(s.period_start, now) for r in runs)
        if spent >= s.budget.amount:
            stops.append(BudgetStop(tenant, tuple(sorted(r.job_id for r in runs)), spent, s.budget))
    return stops
