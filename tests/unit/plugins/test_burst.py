"""burst: cloud clusters only for jobs that allow bursting (unresolvable otherwise)."""

from __future__ import annotations

import pytest

from broker.core.model import JobRequest, Tier
from broker.scheduler.plugins.burst import BurstEligibility
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, prepared


@pytest.mark.parametrize(
    ("tier", "allow_burst", "expected"),
    [
        (Tier.ONPREM, False, UNCHANGED),
        (Tier.ONPREM, True, UNCHANGED),
        (Tier.CLOUD, True, UNCHANGED),
        (Tier.CLOUD, False, ("UNSCHEDULABLE_AND_UNRESOLVABLE", "burst not allowed", None)),
    ],
)
def test_burst(tier: Tier, allow_burst: bool, expected: object) -> None:
    job = JobRequest("j", gpus_per_pod=1, allow_burst=allow_burst)
    assert filter_outcome(BurstEligibility(), job, summary("c", h100(8), tier=tier)) == expected


@pytest.mark.parametrize(("allow_burst", "applies"), [(False, True), (True, False)])
def test_skipped_for_jobs_that_may_burst(allow_burst: bool, applies: bool) -> None:
    assert BurstEligibility().applies(prepared(JobRequest("j", allow_burst=allow_burst))) is applies
