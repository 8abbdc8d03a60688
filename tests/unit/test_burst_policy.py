"""Wait or burst (broker.burst.policy.decide): one table row per rule."""

from __future__ import annotations

from typing import Any

import pytest

from broker.burst.policy import CloudOffer, Verdict, decide, expected_cost

CLOUD = CloudOffer("cloud-a", "H100-80GB", price_per_gpu_hour=4.25)
COLD = CloudOffer("cloud-b", "H100-80GB", price_per_gpu_hour=2.5, ready_in_seconds=600)
SPOT = CloudOffer("cloud-spot", "H100-80GB", price_per_gpu_hour=1.5, spot=True, interruptions_per_hour=0.5)
MIN = 60.0

BASE: dict[str, Any] = {
    "allow_burst": True,
    "gpus": 8,
    "waited_seconds": 0.0,
    "predicted_wait_seconds": 42 * MIN,
    "max_wait_seconds": 10 * MIN,
    "run_seconds": 1440.0,  # 24 min: 8 x 4.25 x 0.4 h = $13.60
    "offers": [CLOUD],
    "budget_left": 200.0,
}


@pytest.mark.parametrize(
    ("change", "verdict", "cluster", "reason"),
    [
        (
            {},
            Verdict.BURST,
            "cloud-a",
            "burst: predicted on-prem wait 42 min > 10 min; est. cost $13.60 of $200.00 left on cloud-a",
        ),
        (
            {"predicted_wait_seconds": 4 * MIN},
            Verdict.WAIT,
            None,
            "wait: predicted on-prem wait 4 min <= 10 min",
        ),
        ({"predicted_wait_seconds": 4 * MIN, "waited_seconds": 7 * MIN}, Verdict.BURST, "cloud-a", None),
        ({"allow_burst": False}, Verdict.WAIT, None, "wait: burst not allowed"),
        (
            {"budget_left": 10.0},
            Verdict.WAIT,
            None,
            "wait: predicted on-prem wait 42 min > 10 min, but over budget: est. cost $13.60 > $10.00 left",
        ),
        ({"budget_left": -5.0}, Verdict.WAIT, None, None),
        ({"budget_left": None}, Verdict.BURST, "cloud-a", None),
        ({"predicted_wait_seconds": None}, Verdict.BURST, "cloud-a", None),
        ({"offers": []}, Verdict.WAIT, None, None),
        # hysteresis: 9 min is under 10 min, but a job that decided burst keeps it down to 8 min
        ({"predicted_wait_seconds": 9 * MIN, "previous": Verdict.BURST}, Verdict.BURST, "cloud-a", None),
        ({"predicted_wait_seconds": 9 * MIN, "previous": Verdict.WAIT}, Verdict.WAIT, None, None),
        ({"predicted_wait_seconds": 7 * MIN, "previous": Verdict.BURST}, Verdict.WAIT, None, None),
        (
            {"allow_burst": False, "already_burst": True, "predicted_wait_seconds": 0.0},
            Verdict.BURST,
            None,
            None,
        ),
        # a pool that must scale up first: cheaper, but counted with its delay, and only if sooner
        ({"offers": [CLOUD, COLD]}, Verdict.BURST, "cloud-b", None),
        (
            {"offers": [COLD], "predicted_wait_seconds": 9.5 * MIN, "max_wait_seconds": 5 * MIN},
            Verdict.WAIT,
            None,
            None,
        ),
        ({"offers": [CLOUD, SPOT]}, Verdict.BURST, "cloud-spot", None),
    ],
    ids=[
        "long-wait-bursts",
        "short-wait-waits",
        "waited-plus-predicted",
        "not-allowed",
        "over-budget",
        "budget-spent",
        "no-budget",
        "never-on-prem",
        "no-cloud",
        "hysteresis-keeps-burst",
        "hysteresis-needs-max-to-start",
        "hysteresis-band-left",
        "never-pulled-back",
        "scale-up-cheaper",
        "scale-up-not-sooner",
        "spot-cheaper-with-risk",
    ],
)
def test_decide(change: dict[str, Any], verdict: Verdict, cluster: str | None, reason: str | None) -> None:
    d = decide(**{**BASE, **change})
    assert d.verdict is verdict, d.reason
    assert d.cluster == cluster
    if reason is not None:
        assert d.reason == reason


def test_cost_counts_provisioning_delay_and_spot_rework() -> None:
    assert expected_cost(CLOUD, 8, 3600) == pytest.approx(34.0)
    assert expected_cost(COLD, 8, 3600) == pytest.approx(2.5 * 8 * (3600 + 600) / 3600)
    # 1 h at 0.5 reclaims/h: the run is expected to take 25% longer
    assert expected_cost(SPOT, 8, 3600) == pytest.approx(1.5 * 8 * 1.25)


def test_burst_reason_names_scale_up_and_spot() -> None:
    d = decide(**{**BASE, "offers": [COLD]})
    assert d.reason.endswith("on cloud-b (after 10 min scale-up)")
    d = decide(**{**BASE, "offers": [SPOT]})
    assert d.reason.endswith("on cloud-spot (spot)")


def test_a_job_without_a_prediction_says_why() -> None:
    d = decide(**{**BASE, "predicted_wait_seconds": None})
    assert d.reason.startswith("burst: no on-prem start (no on-prem cluster can hold it); est. cost $13.60")
    d = decide(**{**BASE, "predicted_wait_seconds": None, "unpredicted": "on-prem wait not predicted (MIG)"})
    assert d.reason.startswith("burst: on-prem wait not predicted (MIG); est. cost $13.60")
