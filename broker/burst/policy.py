"""Wait or burst: whether a queued job that allows bursting goes to a cloud cluster now (docs/burst.md).

Pure (no I/O, no clock). One function, `decide`, over numbers the caller gathers: the job's predicted
on-prem wait (broker.burst.wait_prediction), the cloud clusters that can take it (each with its price, whether
it is spot, and how long until its capacity is there: 0 when it fits now, the pool's provisioning delay
when the autoscaler must add nodes), the job's expected run time and the tenant's budget left
(broker.burst.spend). The rules, in order:

1. A job that does not allow bursting waits. A job already placed on a cloud cluster is never pulled
   back (the caller never asks again; `already_burst` says so when it does).
2. The total wait is what the job has waited plus its predicted on-prem wait. It bursts when the total
   is over `max_wait_seconds`. Hysteresis: a job whose last decision was *burst* (and that could not be
   placed on the cloud yet) keeps bursting until the total falls under (1 - HYSTERESIS) x max wait;
   a job whose last decision was *wait* needs the total over the max wait. So a prediction that wobbles
   around the threshold does not flip the job back and forth every pass.
3. The offer: the cheapest expected cost among the clouds that can start it sooner than on-prem would:
       cost = price x GPUs x (expected run time + provisioning delay) / 3600
   and on a spot cluster the run is lengthened by the expected rework of an interruption:
       run x (1 + min(1, interruption rate per hour x run hours) / 2).
4. Budget: the offer's cost must fit the tenant's budget left for the period (None = no budget); else
   the job waits, and the reason says so ("over budget: est. cost $40.00 > $12.50 left").

The decision carries its numbers and a one-line reason for the job's events:
"burst: predicted on-prem wait 42 min > 10 min; est. cost $13.60 of $200.00 left on cloud-a".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["HYSTERESIS", "BurstDecision", "CloudOffer", "Verdict", "decide", "expected_cost"]

HYSTERESIS = 0.2  # a bursting job keeps bursting down to (1 - this) x its max wait


class Verdict(StrEnum):
    WAIT = "wait"
    BURST = "burst"


@dataclass(frozen=True)
class CloudOffer:
    """A cloud cluster that can take the job, and at what price and delay."""

    cluster: str
    product: str
    price_per_gpu_hour: float
    ready_in_seconds: float = 0.0  # 0: fits now; else the pool's provisioning delay
    spot: bool = False
    interruptions_per_hour: float = 0.0  # spot only: the expected rate of reclaims


@dataclass(frozen=True)
class BurstDecision:
    verdict: Verdict
    reason: str
    cluster: str | None = None  # the cloud cluster, when bursting
    product: str | None = None  # the GPU product of the offer taken
    wait_seconds: float | None = None  # total predicted wait on-prem (waited + still to wait); None: never
    max_wait_seconds: float = 0.0
    cost: float | None = None  # expected cost of the offer chosen (or the cheapest, when over budget)
    budget_left: float | None = None

    @property
    def burst(self) -> bool:
        return self.verdict is Verdict.BURST


def expected_cost(offer: CloudOffer, gpus: int, run_seconds: float) -> float:
    run = run_seconds
    if offer.spot and offer.interruptions_per_hour > 0:
        risk = min(1.0, offer.interruptions_per_hour * run_seconds / 3600)
        run = run_seconds * (1 + risk / 2)
    return offer.price_per_gpu_hour * gpus * (run + offer.ready_in_seconds) / 3600


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def decide(
    *,
    allow_burst: bool,
    gpus: int,
    waited_seconds: float,
    predicted_wait_seconds: float | None,
    max_wait_seconds: float,
    run_seconds: float,
    offers: Sequence[CloudOffer],
    budget_left: float | None,
    previous: Verdict | None = None,
    already_burst: bool = False,
    unpredicted: str = "no on-prem start (no on-prem cluster can hold it)",
) -> BurstDecision:
    """Wait or burst, with the numbers (see the module docstring for the rules). `unpredicted` says
    why there is no predicted wait, when there is none (the job waits on-prem unboundedly)."""
    if already_burst:
        return BurstDecision(Verdict.BURST, "burst earlier: a job on a cloud cluster is not pulled back")
    if not allow_burst:
        return BurstDecision(Verdict.WAIT, "wait: burst not allowed")
    total = None if predicted_wait_seconds is None else max(0.0, waited_seconds) + predicted_wait_seconds
    threshold = max_wait_seconds * (1 - HYSTERESIS) if previous is Verdict.BURST else max_wait_seconds
    limit = _minutes(max_wait_seconds)
    said = "" if total is None else _minutes(total)
    over = unpredicted if total is None else f"predicted on-prem wait {said} > {limit}"
    if total is not None and total <= max_wait_seconds:  # kept bursting by the hysteresis band
        over = (
            f"predicted on-prem wait {said} > {_minutes(threshold)} "
            f"(hysteresis: burst kept down to {1 - HYSTERESIS:.0%} of {limit})"
        )
    if total is not None and total <= threshold:
        note = " (hysteresis: burst below the max wait)" if previous is Verdict.BURST else ""
        return BurstDecision(
            Verdict.WAIT,
            f"wait: predicted on-prem wait {said} <= {limit}{note}",
            wait_seconds=total,
            max_wait_seconds=max_wait_seconds,
            budget_left=budget_left,
        )
    on_prem_start = None if predicted_wait_seconds is None else predicted_wait_seconds
    sooner = [o for o in offers if on_prem_start is None or o.ready_in_seconds < on_prem_start]
    if not sooner:
        return BurstDecision(
            Verdict.WAIT,
            f"wait: {over}, but no cloud cluster can start it sooner",
            wait_seconds=total,
            max_wait_seconds=max_wait_seconds,
            budget_left=budget_left,
        )
    priced = sorted(
        ((expected_cost(o, gpus, run_seconds), o.cluster, o.product, i) for i, o in enumerate(sooner)),
    )
    cost, _, _, index = priced[0]
    offer = sooner[index]
    if budget_left is not None and cost > budget_left:
        return BurstDecision(
            Verdict.WAIT,
            f"wait: {over}, but over budget: est. cost ${cost:.2f} > ${max(0.0, budget_left):.2f} left",
            wait_seconds=total,
            max_wait_seconds=max_wait_seconds,
            cost=cost,
            budget_left=budget_left,
        )
    left = " (no budget set)" if budget_left is None else f" of ${budget_left:.2f} left"
    how = []
    if offer.ready_in_seconds > 0:
        how.append(f"after {_minutes(offer.ready_in_seconds)} scale-up")
    if offer.spot:
        how.append("spot")
    extra = f" ({', '.join(how)})" if how else ""
    return BurstDecision(
        Verdict.BURST,
        f"burst: {over}; est. cost ${cost:.2f}{left} on {offer.cluster}{extra}",
        cluster=offer.cluster,
        product=offer.product,
        wait_seconds=total,
        max_wait_seconds=max_wait_seconds,
        cost=cost,
        budget_left=budget_left,
    )
