"""Spend and budgets (broker.burst.spend): cost = price x GPUs x run time, periods, what is left."""

from __future__ import annotations

import pytest

from broker.burst.spend import (
    Budget,
    Period,
    Run,
    RunningCost,
    budget_left,
    hard_budget_stops,
    period_start,
    spend_by_tenant,
)

# 2027-01-15 (a Friday) 12:00 UTC
NOW = 1_800_000_000.0 - (1_800_000_000.0 % 86400) + 43200


def run(tenant: str, gpus: int, price: float, seconds: float, ended: float = NOW) -> Run:
    return Run("j", 1, tenant, "cloud-a", "H100-80GB", gpus, price, ended - seconds, ended)


def test_spend_equals_price_times_gpus_times_run_time() -> None:
    r = run("ml", 8, 4.25, 5400)
    assert r.gpu_hours == 12
    assert r.cost == pytest.approx(51.0)


@pytest.mark.parametrize(
    ("now", "period", "start"),
    [
        (86400 * 3 + 5, Period.DAY, 86400 * 3),
        (86400 * 3 + 5, Period.WEEK, 86400 * 4 - 7 * 86400),  # 1970-01-04 (Sun) -> Mon 1969-12-29
        (86400 * 4 + 5, Period.WEEK, 86400 * 4),  # 1970-01-05 was a Monday
        (86400 * 40, Period.MONTH, 86400 * 31),  # 1970-02-10 -> 1970-02-01
        (1_709_251_200.0 - 1, Period.MONTH, 1_706_745_600.0),  # 2024-02-29 23:59:59 -> 2024-02-01
        (1_709_251_200.0, Period.MONTH, 1_709_251_200.0),  # 2024-03-01 00:00 is a period start
    ],
)
def test_period_start(now: float, period: Period, start: float) -> None:
    assert period_start(now, period) == start


def test_budget_left_counts_period_spend_and_running_commitments() -> None:
    runs = [run("ml", 8, 4.0, 3600), run("ml", 8, 4.0, 3600, ended=NOW - 2 * 86400), run("cv", 1, 2.0, 1800)]
    spend = spend_by_tenant(runs, {"ml": Budget(200.0, Period.DAY)}, NOW, committed={"ml": 100.0})
    assert spend["ml"].spent == pytest.approx(32.0)  # the run two days ago is in an earlier period
    assert budget_left(spend, "ml") == pytest.approx(68.0)
    assert not spend["ml"].over
    assert budget_left(spend, "cv") is None  # no budget: not limited
    assert spend["cv"].spent == pytest.approx(1.0)


def test_over_budget() -> None:
    spend = spend_by_tenant([run("ml", 8, 10.0, 3600)], {"ml": Budget(50.0)}, NOW)
    assert spend["ml"].over
    assert spend["ml"].left == pytest.approx(-30.0)


HARD = Budget(100.0, Period.DAY, hard=True)
TODAY = period_start(NOW, Period.DAY)  # NOW is 12:00 UTC


def running(job: str, tenant: str, per_hour: float, hours: float | None) -> RunningCost:
    """A job on a priced cluster that started `hours` before NOW (None: placed, not running yet)."""
    return RunningCost(job, tenant, per_hour, None if hours is None else NOW - hours * 3600)


@pytest.mark.parametrize(
    ("budget", "settled", "jobs", "stopped"),
    [
        # under the budget: nothing stops
        (HARD, [run("ml", 8, 4.0, 3600)], [running("a", "ml", 60.0, 1)], []),  # 32 + 60 < 100
        # settled + run up reaches it: every job of the tenant on a priced cluster stops
        (
            HARD,
            [run("ml", 8, 4.0, 3600)],
            [running("a", "ml", 40.0, 1), running("b", "ml", 28.0, 1)],
            ["a", "b"],
        ),
        (
            HARD,
            [],
            [running("b", "ml", 100.0, 1), running("a", "ml", 50.0, None)],
            ["a", "b"],
        ),  # exactly at it
        # settled alone is past it (a job placed but not running yet stops too)
        (HARD, [run("ml", 8, 4.0, 4 * 3600)], [running("a", "ml", 30.0, None)], ["a"]),
        # runs of an earlier day do not count against today's budget
        (HARD, [run("ml", 8, 4.0, 4 * 3600, ended=NOW - 86400)], [running("a", "ml", 5.0, 1)], []),
        # a run that started yesterday counts only its 12 h of today: $96, under; 14 h would be $112
        (HARD, [], [running("a", "ml", 8.0, 20)], []),
        # a run that crossed midnight and ended today is charged for its part in today: 10 x $8 = $80
        (HARD, [run("ml", 1, 8.0, 20 * 3600, ended=TODAY + 10 * 3600)], [running("a", "ml", 30.0, 1)], ["a"]),
        # a soft budget never stops a run, however far over it is
        (Budget(100.0, Period.DAY), [run("ml", 8, 4.0, 4 * 3600)], [running("a", "ml", 500.0, 1)], []),
        # another tenant's runs are not this tenant's
        (HARD, [], [running("a", "cv", 500.0, 1)], []),
    ],
)
def test_hard_budget_stops(
    budget: Budget, settled: list[Run], jobs: list[RunningCost], stopped: list[str]
) -> None:
    spend = spend_by_tenant(settled, {"ml": budget}, NOW)
    stops = hard_budget_stops(spend, jobs, NOW)
    assert [job for s in stops for job in s.job_ids] == stopped
    for s in stops:
        assert s.tenant == "ml" and s.spent >= budget.amount
        assert s.reason.startswith(f"hard budget: tenant ml has spent ${s.spent:.2f} of $100.00 this day")


def test_a_run_across_a_period_start_is_charged_to_each_period_for_its_time_in_it() -> None:
    crossing = run("ml", 2, 3.0, 5 * 3600, ended=TODAY + 2 * 3600)  # 21:00 yesterday to 02:00 today
    spend = spend_by_tenant([crossing], {"ml": Budget(50.0, Period.DAY)}, NOW)
    assert spend["ml"].spent == pytest.approx(2 * 3.0 * 2)  # today's 2 h of it
    assert spend["ml"].gpu_hours == pytest.approx(4.0)
    assert crossing.cost == pytest.approx(30.0)  # the run itself costs its whole time
