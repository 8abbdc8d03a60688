"""mig-fit: MIG slices by name or need, each pod's slices on one node, settled capacity only."""

from __future__ import annotations

import pytest

from broker.core.model import JobRequest, MigCapacity, MigNeed
from broker.scheduler.plugins.mig_fit import MigFit
from tests.unit.k8s_builders import mig, summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, prepared

NO = "UNSCHEDULABLE"


@pytest.mark.parametrize(
    ("job", "migs", "expected"),
    [
        (JobRequest("m", mig_profile="1g.10gb"), (mig(free=1, largest=1),), UNCHANGED),
        (
            JobRequest("m", mig_profile="1g.10gb", mig_slices_per_pod=2, pods=2),
            (mig(free=4, largest=2),),
            UNCHANGED,
        ),
        (  # enough in total, but no node has two free
            JobRequest("m", mig_profile="1g.10gb", mig_slices_per_pod=2, pods=2),
            (mig(free=10, largest=1),),
            (NO, "not enough free MIG 1g.10gb slices", 10),
        ),
        (
            JobRequest("m", mig_profile="1g.10gb", pods=5),
            (mig(free=3, largest=3, settled=False),),
            (NO, "MIG being reconfigured, not enough settled slices", 3),
        ),
        (  # by need: the profiles that meet it and have room stay
            JobRequest("m", mig_need=MigNeed(10)),
            (mig("H100-80GB", "1g.10gb", free=0, largest=0), mig("H100-80GB", "3g.40gb")),
            ["3g.40gb"],
        ),
        (
            JobRequest("m", mig_need=MigNeed(10)),
            (mig("H100-80GB", "1g.10gb", free=0, largest=0), mig("H100-80GB", "3g.40gb", free=0, largest=0)),
            (NO, "not enough free MIG 1g.10gb/3g.40gb slices", 0),
        ),
    ],
)
def test_mig_fit(job: JobRequest, migs: tuple[MigCapacity, ...], expected: object) -> None:
    assert filter_outcome(MigFit(), job, summary("a", migs=migs)) == expected


@pytest.mark.parametrize(
    ("job", "applies"),
    [
        (JobRequest("m", mig_profile="1g.10gb"), True),
        (JobRequest("m", mig_need=MigNeed(10)), True),
        (JobRequest("j", gpus_per_pod=1), False),
    ],
)
def test_applies_to_mig_jobs_only(job: JobRequest, applies: bool) -> None:
    assert MigFit().applies(prepared(job)) is applies
