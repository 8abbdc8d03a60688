"""kueue (filter) and queue (score): the ClusterQueue quota has room; more room left scores higher."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterTraits, JobRequest, QueueHeadroom
from broker.scheduler.plugins.kueue import KueueHeadroom, QueueHeadroomScore
from tests.unit.k8s_builders import mig, summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, l4, prepared, score_of

KUEUE = ClusterTraits("k", kueue_local_queue="gpu")


def quota(flavor: str, nominal: int, used: int, resource: str = "nvidia.com/gpu") -> QueueHeadroom:
    return QueueHeadroom("gpu-cq", flavor, resource, nominal=nominal, used=used)


@pytest.mark.parametrize(
    ("queues", "traits", "gpus", "expected"),
    [
        ((quota("h100-80gb", 16, 12),), KUEUE, 4, UNCHANGED),
        (
            (quota("h100-80gb", 16, 12),),
            KUEUE,
            8,
            ("UNSCHEDULABLE", "Kueue quota for nvidia.com/gpu exhausted", 4),
        ),
        ((quota("h100-80gb", 16, 12),), None, 8, UNCHANGED),  # no Kueue there: queues ignored
        ((quota("default", 16, 0),), KUEUE, 8, UNCHANGED),  # any flavor covering the resource
        (
            (quota("default", 4, 0, resource="nvidia.com/mig-1g.10gb"),),
            KUEUE,
            1,
            ("UNSCHEDULABLE_AND_UNRESOLVABLE", "Kueue quota does not cover nvidia.com/gpu", None),
        ),
        ((), KUEUE, 8, UNCHANGED),  # Kueue declared but no queues observed
    ],
)
def test_kueue_headroom(
    queues: tuple[QueueHeadroom, ...], traits: ClusterTraits | None, gpus: int, expected: object
) -> None:
    s = summary("k", h100(8, 8), queues=queues)
    assert filter_outcome(KueueHeadroom(), JobRequest("j", gpus_per_pod=gpus), s, traits) == expected


def test_the_flavor_named_after_the_product_is_the_one_that_counts() -> None:
    s = summary("k", h100(8), l4(4), queues=(quota("h100-80gb", 8, 8), quota("l4", 8, 0)))
    assert filter_outcome(KueueHeadroom(), JobRequest("j", gpus_per_pod=2), s, KUEUE) == ["L4"]


@pytest.mark.parametrize(
    ("job", "applies"),
    [
        (JobRequest("j", gpus_per_pod=1), True),
        (JobRequest("m", mig_profile="1g.10gb"), True),
        (JobRequest("cpu"), False),
    ],
)
def test_applies_to_gpu_jobs(job: JobRequest, applies: bool) -> None:
    assert KueueHeadroom().applies(prepared(job)) is applies


@pytest.mark.parametrize(
    ("job", "cluster", "traits", "expected"),
    [
        # Kueue: (headroom - need) / nominal
        (
            JobRequest("j", gpus_per_pod=4),
            summary("k", h100(8, 8), queues=(quota("h100-80gb", 16, 4),)),
            KUEUE,
            50,
        ),
        (
            JobRequest("j", gpus_per_pod=4),
            summary("k", h100(8, 8), queues=(quota("h100-80gb", 16, 12),)),
            KUEUE,
            0,
        ),
        # no Kueue: free GPUs left / allocatable (16 allocatable, 16 free, 4 needed)
        (JobRequest("j", gpus_per_pod=4), summary("k", h100(8, 8)), None, 75),
        # MIG: free slices left / allocatable (14, 14 free, 7 needed)
        (JobRequest("m", mig_profile="1g.10gb", pods=7), summary("k", migs=(mig(),)), None, 50),
        (JobRequest("cpu"), summary("k"), None, 50),  # nothing to measure: neutral
    ],
)
def test_queue_headroom_score(
    job: JobRequest, cluster: object, traits: ClusterTraits | None, expected: int
) -> None:
    assert score_of(QueueHeadroomScore(), job, cluster, traits) == expected  # type: ignore[arg-type]
