"""numa-fit: a NUMA-aligned job's pods each need their GPUs free inside one NUMA zone."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterSummary, JobRequest
from broker.scheduler.plugins.numa import NumaFit
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, prepared

NO = "UNSCHEDULABLE"


@pytest.mark.parametrize(
    ("cluster", "gpus", "pods", "expected"),
    [
        (summary("a", h100(4, numa=(4,))), 4, 1, UNCHANGED),
        (summary("a", h100(8, numa=(2,))), 4, 1, (NO, "no node with 4 free H100-80GB in one NUMA zone", 2)),
        (summary("a", h100(8, 8, numa=(4, 4))), 4, 2, UNCHANGED),
        (
            summary("a", h100(8, 8, numa=(4, 2))),
            4,
            2,
            (NO, "no 2 nodes with 4 free H100-80GB in one NUMA zone", 4),
        ),
    ],
)
def test_numa_fit(cluster: ClusterSummary, gpus: int, pods: int, expected: object) -> None:
    job = JobRequest("j", gpus_per_pod=gpus, pods=pods, numa_aligned=True)
    assert filter_outcome(NumaFit(), job, cluster) == expected


@pytest.mark.parametrize(
    ("job", "applies"),
    [
        (JobRequest("j", gpus_per_pod=4, numa_aligned=True), True),
        (JobRequest("j", gpus_per_pod=4), False),
        (JobRequest("cpu", numa_aligned=True), False),
    ],
)
def test_applies_to_numa_aligned_gpu_jobs_only(job: JobRequest, applies: bool) -> None:
    assert NumaFit().applies(prepared(job)) is applies
