"""gpu-fit: whole GPUs, each pod on one node, the gang at once, read from the free-GPU histogram."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterSummary, JobRequest, MigNeed
from broker.scheduler.plugins.gpu_fit import WholeGpuFit, fit_table
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, l4, prepared

NO = "UNSCHEDULABLE"


@pytest.mark.parametrize(
    ("cluster", "gpus", "pods", "expected"),
    [
        (summary("a", h100(8, 2)), 4, 1, UNCHANGED),
        (summary("a", h100(8, 8)), 4, 4, UNCHANGED),  # two pods per node
        (summary("a", h100(8, 6)), 4, 4, (NO, "no room for 4 pods x 4 H100-80GB", 3)),
        (summary("a", h100(2, 2, 2, 2)), 2, 4, UNCHANGED),
        (summary("a", h100(2, 2, 2, 1)), 2, 4, (NO, "no room for 4 pods x 2 H100-80GB", 3)),
        (summary("a", h100(4, 2)), 8, 1, (NO, "no node with 8 free H100-80GB", 4)),
        (summary("a", h100(8), l4(4, 4)), 8, 1, ["H100-80GB"]),  # narrowed to what fits
        (summary("a", h100(8), l4(4, 4)), 4, 2, UNCHANGED),
        (summary("a", h100(2), l4(1)), 4, 1, (NO, "no node with 4 free GPUs", 2)),  # several products
        (summary("a", h100(0)), 1, 1, (NO, "no node with 1 free H100-80GB", 0)),
    ],
)
def test_whole_gpu_fit(cluster: ClusterSummary, gpus: int, pods: int, expected: object) -> None:
    job = JobRequest("j", gpus_per_pod=gpus, pods=pods)
    assert filter_outcome(WholeGpuFit(), job, cluster) == expected


@pytest.mark.parametrize(
    ("job", "applies"),
    [
        (JobRequest("j", gpus_per_pod=1), True),
        (JobRequest("cpu"), False),
        (JobRequest("m", mig_profile="1g.10gb"), False),
        (JobRequest("m", mig_need=MigNeed(10)), False),
    ],
)
def test_applies_to_whole_gpu_jobs_only(job: JobRequest, applies: bool) -> None:
    assert WholeGpuFit().applies(prepared(job)) is applies


def test_the_fit_table_is_worked_out_once_per_summary_and_size() -> None:
    s = summary("a", h100(8, 4), l4(4))
    table = fit_table(s, 4)
    assert table == {("H100-80GB", False): 3, ("L4", False): 1}  # (product, DRA kind)
    assert fit_table(s, 4) is table
    assert fit_table(s, 2) == {("H100-80GB", False): 6, ("L4", False): 2}
