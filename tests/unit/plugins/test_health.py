"""health: unreachable, forbidden, never observed or stale clusters are rejected (resolvably)."""

from __future__ import annotations

import pytest

from broker.core.model import Health, JobRequest
from broker.scheduler.plugins.health import HealthFreshness
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import NOW, UNCHANGED, filter_outcome, h100, prepared

JOB = JobRequest("j", gpus_per_pod=1)


@pytest.mark.parametrize(
    ("health", "heartbeat", "limit", "expected"),
    [
        (Health.HEALTHY, NOW, 120.0, UNCHANGED),
        (Health.DEGRADED, NOW, 120.0, UNCHANGED),  # degraded still takes work
        (Health.UNREACHABLE, NOW, 120.0, ("UNSCHEDULABLE", "unreachable", None)),
        (Health.FORBIDDEN, NOW, 120.0, ("UNSCHEDULABLE", "credentials rejected", None)),
        (Health.UNKNOWN, NOW, 120.0, ("UNSCHEDULABLE", "not yet observed", None)),
        (Health.HEALTHY, NOW - 120.0, 120.0, UNCHANGED),  # exactly at the limit: fresh
        (Health.HEALTHY, NOW - 121.0, 120.0, ("UNSCHEDULABLE", "stale", None)),
        (Health.HEALTHY, NOW - 31.0, 30.0, ("UNSCHEDULABLE", "stale", None)),  # the knob is the plugin's
        (Health.HEALTHY, NOW - 29.0, 30.0, UNCHANGED),
    ],
)
def test_health_and_freshness(health: Health, heartbeat: float, limit: float, expected: object) -> None:
    s = summary("a", h100(8), health=health, heartbeat=heartbeat)
    assert filter_outcome(HealthFreshness(staleness_limit_seconds=limit), JOB, s) == expected


def test_applies_to_every_job() -> None:
    assert HealthFreshness().applies(prepared(JobRequest("cpu")))
