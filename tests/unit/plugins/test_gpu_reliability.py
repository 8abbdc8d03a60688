"""gpu-reliability (score): clusters whose GPUs fail more often get fewer long jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.gpu_health import ClusterGpuHealth
from broker.core.model import JobRequest
from broker.scheduler.plugins.gpu_reliability import GpuReliabilityScore
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import h100, score_of


@pytest.mark.parametrize(
    ("faults", "duration", "expected"),
    [
        (0, None, 100),  # no faults
        (1, None, 75),  # 80 GPUs, 1 fault in the window: a rate of 1.25%, a quarter of the 5% that scores 0
        (2, 7200.0, 50),  # a long job
        (2, 600.0, 100),  # a short job does not care
        (4, None, 0),
        (9, None, 0),  # never below 0
    ],
)
def test_long_jobs_prefer_clusters_whose_gpus_fail_less(
    faults: int, duration: float | None, expected: int
) -> None:
    s = replace(
        summary("c", h100(*[8] * 10)), gpu_health=ClusterGpuHealth(recent_faults=faults, observed=True)
    )
    job = JobRequest("j", gpus_per_pod=8, duration_seconds=duration)
    assert score_of(GpuReliabilityScore(), job, s) == expected


def test_no_health_data_scores_full() -> None:
    assert score_of(GpuReliabilityScore(), JobRequest("j", gpus_per_pod=1), summary("c", h100(8))) == 100
