"""binpack (score): fill the snuggest nodes (binpack) or keep the most room (spread), the plugin's knob."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterSummary, JobRequest
from broker.scheduler.plugins.binpack import BinPackScore
from tests.unit.k8s_builders import mig, summary
from tests.unit.plugins.helpers import h100, score_of


@pytest.mark.parametrize(
    ("cluster", "job", "binpack", "spread"),
    [
        # one 2-GPU pod: a node with exactly 2 free is a perfect fit, an 8-free node wastes 6
        (summary("a", h100(2, 0)), JobRequest("j", gpus_per_pod=2), 100, 0),
        (summary("a", h100(8, 8)), JobRequest("j", gpus_per_pod=2), 25, 88),
        # a gang of 4 x 2 fills one 8-free node exactly
        (summary("a", h100(8, 8)), JobRequest("j", gpus_per_pod=2, pods=4), 100, 50),
        # 3 pods x 4: two 8-free nodes are touched (16 GPUs) for 12
        (summary("a", h100(8, 8)), JobRequest("j", gpus_per_pod=4, pods=3), 75, 25),
        # MIG: slices per pod over the largest free block on a node
        (summary("a", migs=(mig(free=14, largest=7),)), JobRequest("m", mig_profile="1g.10gb"), 14, 93),
        (summary("a"), JobRequest("cpu"), 50, 50),  # nothing to pack
    ],
)
def test_binpack_and_spread(cluster: ClusterSummary, job: JobRequest, binpack: int, spread: int) -> None:
    assert score_of(BinPackScore(), job, cluster) == binpack
    assert score_of(BinPackScore(strategy="spread"), job, cluster) == spread
