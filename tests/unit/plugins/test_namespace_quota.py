"""namespace-quota (filter): the tenant's namespace exists or may be created, its LimitRange admits the
pod and its ResourceQuota takes the job; otherwise the reason names the namespace and the numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    JobRequest,
    LimitRangeItem,
    MemberNamespace,
    QuotaStatus,
)
from broker.scheduler.plugins.namespace_quota import NamespaceQuota
from tests.unit.k8s_builders import summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100

TENANTS = ClusterTraits("a", tenant_namespace="gpufed-{tenant}")
CREATES = replace(TENANTS, create_namespaces=True)
JOB = JobRequest("j", tenant="ml", gpus_per_pod=4)


def gpu_quota(used: int, hard: int = 16) -> QuotaStatus:
    return QuotaStatus("gpu", {"requests.nvidia.com/gpu": hard}, {"requests.nvidia.com/gpu": used})


def observed(*namespaces: MemberNamespace) -> ClusterSummary:
    return replace(summary("a", h100(8, 8)), namespaces=namespaces, namespaces_observed=True)


@pytest.mark.parametrize(
    ("cluster", "traits", "job", "expected"),
    [
        (observed(MemberNamespace("gpufed-ml", (gpu_quota(12),))), TENANTS, JOB, UNCHANGED),
        (
            observed(MemberNamespace("gpufed-ml", (gpu_quota(14),))),
            TENANTS,
            JOB,
            ("UNSCHEDULABLE", "quota gpufed-ml: nvidia.com/gpu 14/16, job needs 4", None),
        ),
        (  # more than the quota's hard: no job ending helps
            observed(MemberNamespace("gpufed-ml", (gpu_quota(0, hard=2),))),
            TENANTS,
            JOB,
            ("UNSCHEDULABLE_AND_UNRESOLVABLE", "quota gpufed-ml: nvidia.com/gpu 0/2, job needs 4", None),
        ),
        (  # another tenant's namespace is full: not this job's business
            observed(MemberNamespace("gpufed-ml", ()), MemberNamespace("gpufed-cv", (gpu_quota(16),))),
            TENANTS,
            JOB,
            UNCHANGED,
        ),
        (
            observed(),
            TENANTS,
            JOB,
            (
                "UNSCHEDULABLE_AND_UNRESOLVABLE",
                "namespace gpufed-ml missing (the broker may not create it)",
                None,
            ),
        ),
        (observed(), CREATES, JOB, UNCHANGED),  # created on first use
        (summary("a", h100(8)), TENANTS, JOB, UNCHANGED),  # namespaces not watched: nothing known
        (observed(MemberNamespace("gpufed-ml", (gpu_quota(14),))), None, JOB, UNCHANGED),
        (  # no pattern: the cluster's one namespace is every tenant's
            observed(MemberNamespace("default", (gpu_quota(14),))),
            ClusterTraits("a"),
            JOB,
            ("UNSCHEDULABLE", "quota default: nvidia.com/gpu 14/16, job needs 4", None),
        ),
        (  # the LimitRange's default cpu limit breaks its own ratio for this job's request
            observed(
                MemberNamespace(
                    "gpufed-ml",
                    limits=(
                        LimitRangeItem(
                            "Container",
                            default={"cpu": 8000},
                            default_request={"cpu": 8000},
                            max_limit_request_ratio={"cpu": 2.0},
                        ),
                    ),
                )
            ),
            TENANTS,
            JOB,
            (
                "UNSCHEDULABLE_AND_UNRESOLVABLE",
                "limits gpufed-ml: cpu max limit to request ratio per Container is 2, but provided ratio is 8.000000",
                None,
            ),
        ),
        (  # a limits.cpu quota is satisfied by the LimitRange's default cpu limit
            observed(
                MemberNamespace(
                    "gpufed-ml",
                    quotas=(QuotaStatus("cpu", {"limits.cpu": 8000}, {"limits.cpu": 6000}),),
                    limits=(
                        LimitRangeItem("Container", default={"cpu": 2000}, default_request={"cpu": 2000}),
                    ),
                )
            ),
            TENANTS,
            JOB,
            UNCHANGED,
        ),
    ],
)
def test_namespace_quota(
    cluster: ClusterSummary, traits: ClusterTraits | None, job: JobRequest, expected: object
) -> None:
    assert filter_outcome(NamespaceQuota(), job, cluster, traits) == expected
