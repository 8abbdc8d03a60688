"""allowlist: a job that names clusters goes only there (unresolvable elsewhere); others skip it."""

from __future__ import annotations

import pytest

from broker.core.model import JobRequest
from broker.scheduler.plugins.allowlist import ClusterAllowList
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, prepared


@pytest.mark.parametrize(
    ("clusters", "cluster", "expected"),
    [
        ((), "a", UNCHANGED),
        (("a",), "a", UNCHANGED),
        (("a", "b"), "b", UNCHANGED),
        (("b",), "a", ("UNSCHEDULABLE_AND_UNRESOLVABLE", "not in the job's cluster list", None)),
    ],
)
def test_allow_list(clusters: tuple[str, ...], cluster: str, expected: object) -> None:
    job = JobRequest("j", gpus_per_pod=1, clusters=clusters)
    assert filter_outcome(ClusterAllowList(), job, summary(cluster, h100(8))) == expected


@pytest.mark.parametrize(("clusters", "applies"), [((), False), (("a",), True)])
def test_skipped_for_jobs_without_a_cluster_list(clusters: tuple[str, ...], applies: bool) -> None:
    assert ClusterAllowList().applies(prepared(JobRequest("j", clusters=clusters))) is applies
