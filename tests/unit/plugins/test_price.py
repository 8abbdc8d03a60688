"""price-cap (filter) and price (score): the job's price cap, cheaper GPU-hours score higher."""

from __future__ import annotations

import pytest

from broker.core.model import JobRequest, Tier
from broker.scheduler.plugins.price import PriceCap, PriceScore
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, l4, prepared, score_of

PRICES = {"H100-80GB": 4.5, "L4": 0.8}


@pytest.mark.parametrize(
    ("cap", "prices", "expected"),
    [
        (3.0, {}, UNCHANGED),  # no declared price: free
        (5.0, PRICES, UNCHANGED),
        (4.5, PRICES, UNCHANGED),  # at the cap is within it
        (3.0, PRICES, ["L4"]),
        (0.5, PRICES, ("UNSCHEDULABLE_AND_UNRESOLVABLE", "over the price cap", None)),
    ],
)
def test_price_cap(cap: float, prices: dict[str, float], expected: object) -> None:
    job = JobRequest("j", gpus_per_pod=1, allow_burst=True, max_price_per_gpu_hour=cap)
    s = summary("c", h100(8), l4(4), tier=Tier.CLOUD, price=prices)
    assert filter_outcome(PriceCap(), job, s) == expected


@pytest.mark.parametrize(("cap", "applies"), [(None, False), (2.0, True)])
def test_cap_skipped_for_jobs_without_one(cap: float | None, applies: bool) -> None:
    assert PriceCap().applies(prepared(JobRequest("j", max_price_per_gpu_hour=cap))) is applies


@pytest.mark.parametrize(
    ("price", "ceiling", "expected"),
    [
        (None, 10.0, 100),  # undeclared: free
        (0.0, 10.0, 100),
        (2.5, 10.0, 75),
        (5.0, 10.0, 50),
        (10.0, 10.0, 0),
        (12.0, 10.0, 0),  # above the ceiling: 0, never negative
        (2.5, 5.0, 50),  # the ceiling is the plugin's knob
        (2.5, 0.0, 100),  # no ceiling: price does not count
    ],
)
def test_price_score(price: float | None, ceiling: float, expected: int) -> None:
    s = summary("c", h100(8), price={} if price is None else {"H100-80GB": price})
    score = score_of(PriceScore(ceiling_per_gpu_hour=ceiling), JobRequest("j", gpus_per_pod=1), s)
    assert score == expected
