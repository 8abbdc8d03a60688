"""nvlink-clique: a gang that asks for one NVLink clique fits in ONE clique, best fit, or says why not."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterSummary, Code, JobRequest
from broker.core.topology import NvlinkClique
from broker.scheduler.framework import Status
from broker.scheduler.plugins.nvlink import NvlinkCliqueFit, NvlinkCliqueScore
from tests.unit.plugins.helpers import UNCHANGED, prepared, run_filter, score_of
from tests.unit.topology_builders import clique_id, cluster, gb200, rack

REQ, PREF = NvlinkClique.REQUIRED, NvlinkClique.PREFERRED


def gang(pods: int, wish: NvlinkClique = REQ, gpus: int = 4) -> JobRequest:
    return JobRequest("train", gpus_per_pod=gpus, pods=pods, nvlink_clique=wish)


def verdict(job: JobRequest, summary: ClusterSummary) -> object:
    """UNCHANGED, the clique kept, or (code, reason)."""
    result, options = run_filter(NvlinkCliqueFit(), job, summary)
    if isinstance(result, Status):
        return (result.code.name, result.reason)
    if result is options:
        return UNCHANGED
    return [o.clique for o in result]


@pytest.mark.parametrize(
    ("name", "summary", "job", "expected"),
    [
        # best fit: the clique with the least room that still takes the gang, so whole racks stay free
        (
            "best fit",
            cluster("a", rack("a", 1, 18), rack("a", 2, 9), rack("a", 3, 8)),
            gang(8),
            [clique_id(3)],
        ),
        ("exact rack", cluster("a", rack("a", 1, 18), rack("a", 2, 17)), gang(18), [clique_id(1)]),
        ("two pods a node", cluster("a", rack("a", 1, 18), rack("a", 2, 4)), gang(8, gpus=2), [clique_id(2)]),
        # fragmentation: 12 free nodes in the cluster, but 6 + 6 in two racks: no clique takes 8
        (
            "fragmented",
            cluster("a", rack("a", 1, 6, busy_nodes=12), rack("a", 2, 6, busy_nodes=12)),
            gang(8),
            (
                Code.UNSCHEDULABLE.name,
                f"no NVLink clique with 8 nodes of 4 free GB200 (best: 6 in {clique_id(1)})",
            ),
        ),
        (
            "half-free nodes do not count",
            cluster("a", rack("a", 1, 5) + [gb200(f"h{i}", 1, allocated=2) for i in range(5)]),
            gang(8),
            (
                Code.UNSCHEDULABLE.name,
                f"no NVLink clique with 8 nodes of 4 free GB200 (best: 5 in {clique_id(1)})",
            ),
        ),
        (
            "no clique labels",
            cluster("a", [gb200(f"n{i}", None) for i in range(8)]),
            gang(8),
            (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE.name,
                "no NVLink clique of GB200 (no node labelled nvidia.com/gpu.clique)",
            ),
        ),
        # preferred: one clique when one fits, else any nodes (the options unchanged)
        ("preferred fits", cluster("a", rack("a", 1, 18), rack("a", 2, 8)), gang(8, PREF), [clique_id(2)]),
        ("preferred falls back", cluster("a", rack("a", 1, 6), rack("a", 2, 6)), gang(8, PREF), UNCHANGED),
    ],
)
def test_clique_fit(name: str, summary: ClusterSummary, job: JobRequest, expected: object) -> None:
    assert verdict(job, summary) == expected, name


def test_applies_only_to_whole_gpu_jobs_that_ask() -> None:
    plugin = NvlinkCliqueFit()
    assert plugin.applies(prepared(gang(8)))
    assert not plugin.applies(prepared(gang(8, NvlinkClique.NONE)))
    assert not plugin.applies(prepared(JobRequest("m", mig_profile="1g.10gb", nvlink_clique=REQ)))


def test_a_preferred_gang_scores_lower_outside_one_clique() -> None:
    split = cluster("a", rack("a", 1, 6), rack("a", 2, 6))
    whole = cluster("b", rack("b", 1, 8))
    score = NvlinkCliqueScore()
    assert score_of(score, gang(8, NvlinkClique.NONE), split) == 100  # asks nothing: no difference
    assert score_of(score, gang(8, PREF), split) == 0  # the option carries no clique
    result, _ = run_filter(NvlinkCliqueFit(), gang(8, PREF), whole)
    assert not isinstance(result, Status)
    assert score.score(prepared(gang(8, PREF)), whole, None, result[0]) == 100
