"""broker.tenancy.member_quota: a member namespace's ResourceQuota and LimitRange as the API server applies them.

Tables per rule: LimitRange objects read as stored (defaulting), LimitRanger's defaults on the broker's
container, its min/max/ratio refusals, what a Job charges a quota, and the quota's refusal in words."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.model import JobRequest, LimitRangeItem, MemberNamespace, QuotaStatus
from broker.tenancy import member_quota

GI = 2**30
MI = 2**20


def limit_range(*items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "defaults", "namespace": "gpufed-ml"}, "spec": {"limits": list(items)}}


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (  # as written: defaults kept
            {"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "250m"}},
            LimitRangeItem("Container", default={"cpu": 500}, default_request={"cpu": 250}),
        ),
        (  # the API server's defaulting: default from max, defaultRequest from default
            {"type": "Container", "max": {"cpu": "2", "memory": "4Gi"}},
            LimitRangeItem(
                "Container",
                default={"cpu": 2000, "memory": 4 * GI},
                default_request={"cpu": 2000, "memory": 4 * GI},
                max={"cpu": 2000, "memory": 4 * GI},
            ),
        ),
        (  # Pod items bound the pod, they default nothing
            {"type": "Pod", "max": {"nvidia.com/gpu": "8"}, "maxLimitRequestRatio": {"cpu": "4"}},
            LimitRangeItem("Pod", max={"nvidia.com/gpu": 8}, max_limit_request_ratio={"cpu": 4.0}),
        ),
    ],
)
def test_a_limit_range_reads_as_the_api_server_stores_it(
    item: dict[str, Any], expected: LimitRangeItem
) -> None:
    assert member_quota.parse_limit_range(limit_range(item)) == (expected,)


def test_persistent_volume_claim_items_are_not_about_pods_and_bad_quantities_name_the_field() -> None:
    assert (
        member_quota.parse_limit_range(
            limit_range({"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}})
        )
        == ()
    )
    with pytest.raises(ValueError, match=r"spec.limits\[0\].max\[cpu\]"):
        member_quota.parse_limit_range(limit_range({"type": "Container", "max": {"cpu": "lots"}}))


def test_a_quota_reads_hard_and_used_in_the_brokers_units() -> None:
    obj = {
        "metadata": {"name": "gpu", "namespace": "gpufed-ml"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "16", "requests.cpu": "64", "limits.memory": "1Ti"}},
        "status": {"used": {"requests.nvidia.com/gpu": "14", "requests.cpu": "3500m"}},
    }
    assert member_quota.parse_resource_quota(obj) == QuotaStatus(
        "gpu",
        hard={"requests.nvidia.com/gpu": 16, "requests.cpu": 64000, "limits.memory": 2**40},
        used={"requests.nvidia.com/gpu": 14, "requests.cpu": 3500, "limits.memory": 0},
    )


DEFAULTS = LimitRangeItem(
    "Container",
    default={"cpu": 2000, "memory": 2 * GI, "ephemeral-storage": 10 * GI},
    default_request={"cpu": 500, "memory": GI, "ephemeral-storage": GI},
)


@pytest.mark.parametrize(
    ("requests", "limits", "items", "expected"),
    [
        # nothing stated: limits from default, requests from defaultRequest
        ({}, {}, (DEFAULTS,), ({"cpu": 500, "memory": GI, "ephemeral-storage": GI}, dict(DEFAULTS.default))),
        # a stated request is kept; only the missing limit is defaulted
        (
            {"cpu": 1000},
            {},
            (DEFAULTS,),
            ({"cpu": 1000, "memory": GI, "ephemeral-storage": GI}, dict(DEFAULTS.default)),
        ),
        # a stated limit is also the request (API defaulting), never the defaultRequest
        (
            {},
            {"memory": 4 * GI},
            (DEFAULTS,),
            (
                {"cpu": 500, "memory": 4 * GI, "ephemeral-storage": GI},
                {"cpu": 2000, "memory": 4 * GI, "ephemeral-storage": 10 * GI},
            ),
        ),
        # the broker's usual pod: cpu and memory requested, memory and GPUs limited -> cpu limit defaulted
        (
            {"cpu": 1000, "memory": GI, "nvidia.com/gpu": 4},
            {"memory": GI, "nvidia.com/gpu": 4},
            (LimitRangeItem("Container", default={"cpu": 4000}, default_request={"cpu": 4000}),),
            (
                {"cpu": 1000, "memory": GI, "nvidia.com/gpu": 4},
                {"cpu": 4000, "memory": GI, "nvidia.com/gpu": 4},
            ),
        ),
        # Pod items default nothing; no LimitRange leaves the pod as it is
        ({"cpu": 1000}, {}, (LimitRangeItem("Pod", max={"cpu": 8000}),), ({"cpu": 1000}, {})),
        ({"cpu": 1000}, {}, (), ({"cpu": 1000}, {})),
    ],
)
def test_limit_range_defaults_are_applied_as_limitranger_does(
    requests: dict[str, int], limits: dict[str, int], items: tuple[LimitRangeItem, ...], expected: object
) -> None:
    assert member_quota.apply_limit_ranges(requests, limits, items) == expected


@pytest.mark.parametrize(
    ("requests", "limits", "item", "expected"),
    [
        (
            {"cpu": 1000},
            {"cpu": 4000},
            LimitRangeItem("Container", max={"cpu": 2000}),
            "maximum cpu usage per Container is 2, but limit is 4",
        ),
        (
            {"cpu": 1000},
            {},
            LimitRangeItem("Container", max={"cpu": 2000}),
            "maximum cpu usage per Container is 2.  No limit is specified",
        ),
        (
            {"cpu": 50},
            {},
            LimitRangeItem("Container", min={"cpu": 100}),
            "minimum cpu usage per Container is 100m, but request is 50m",
        ),
        (
            {},
            {},
            LimitRangeItem("Pod", min={"memory": GI}),
            "minimum memory usage per Pod is 1Gi.  No request is specified",
        ),
        (
            {"cpu": 500},
            {"cpu": 4000},
            LimitRangeItem("Container", max_limit_request_ratio={"cpu": 2.0}),
            "cpu max limit to request ratio per Container is 2, but provided ratio is 8.000000",
        ),
        (
            {"nvidia.com/gpu": 8},
            {"nvidia.com/gpu": 8},
            LimitRangeItem("Pod", max={"nvidia.com/gpu": 8}),
            None,
        ),
    ],
)
def test_limit_range_bounds_refuse_with_the_api_servers_words(
    requests: dict[str, int], limits: dict[str, int], item: LimitRangeItem, expected: str | None
) -> None:
    assert member_quota.limit_range_refusal(requests, limits, (item,)) == expected


def test_a_job_charges_the_quota_for_all_its_pods_and_itself() -> None:
    usage = member_quota.quota_usage({"cpu": 1000, "nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2}, pods=4)
    assert usage == {
        "pods": 4,
        "count/pods": 4,
        "count/jobs.batch": 1,
        "requests.cpu": 4000,
        "cpu": 4000,
        "requests.nvidia.com/gpu": 8,
        "limits.nvidia.com/gpu": 8,
    }


def ns(*quotas: QuotaStatus) -> MemberNamespace:
    return MemberNamespace("gpufed-ml", quotas=quotas)


GPU4 = ({"cpu": 1000, "memory": GI, "nvidia.com/gpu": 4}, {"memory": GI, "nvidia.com/gpu": 4})


@pytest.mark.parametrize(
    ("namespace", "pod", "pods", "expected"),
    [
        (
            ns(QuotaStatus("q", {"requests.nvidia.com/gpu": 16}, {"requests.nvidia.com/gpu": 12})),
            GPU4,
            1,
            None,
        ),
        (
            ns(QuotaStatus("q", {"requests.nvidia.com/gpu": 16}, {"requests.nvidia.com/gpu": 14})),
            GPU4,
            1,
            "quota gpufed-ml: nvidia.com/gpu 14/16, job needs 4",
        ),
        (  # a gang needs all its pods at once
            ns(QuotaStatus("q", {"requests.nvidia.com/gpu": 16}, {"requests.nvidia.com/gpu": 0})),
            GPU4,
            5,
            "quota gpufed-ml: nvidia.com/gpu 0/16, job needs 20",
        ),
        (
            ns(QuotaStatus("q", {"count/jobs.batch": 3}, {"count/jobs.batch": 3})),
            GPU4,
            1,
            "quota gpufed-ml: count/jobs.batch 3/3, job needs 1",
        ),
        (
            ns(QuotaStatus("q", {"requests.memory": 8 * GI}, {"requests.memory": 7 * GI + 512 * MI})),
            GPU4,
            1,
            "quota gpufed-ml: memory 7680Mi/8Gi, job needs 1Gi",  # quantities as Kubernetes writes them,
        ),
        (  # a limits.cpu quota needs every container to state a cpu limit (the broker's has none)
            ns(QuotaStatus("q", {"limits.cpu": 64000}, {})),
            GPU4,
            1,
            "quota gpufed-ml: must specify limits.cpu (set a LimitRange default)",
        ),
        (  # MIG by profile, quota on another profile: not charged
            ns(QuotaStatus("q", {"requests.nvidia.com/mig-3g.40gb": 0}, {})),
            ({"cpu": 1000, "nvidia.com/mig-1g.10gb": 1}, {"nvidia.com/mig-1g.10gb": 1}),
            1,
            None,
        ),
        (ns(), GPU4, 1, None),
    ],
)
def test_the_quota_refusal_names_the_namespace_the_resource_and_the_need(
    namespace: MemberNamespace, pod: tuple[dict[str, int], dict[str, int]], pods: int, expected: str | None
) -> None:
    assert member_quota.quota_refusal(namespace, pod[0], pod[1], pods) == expected


def test_the_brokers_container_is_what_level_2_writes() -> None:
    job = JobRequest("j", cpu_millis_per_pod=1500, memory_mib_per_pod=2048)
    assert member_quota.container_resources(job, "nvidia.com/gpu", 2) == (
        {"cpu": 1500, "memory": 2 * GI, "nvidia.com/gpu": 2},
        {"memory": 2 * GI, "nvidia.com/gpu": 2},
    )
    numa = JobRequest("j", cpu_millis_per_pod=1500, numa_aligned=True)
    requests, limits = member_quota.container_resources(numa, "nvidia.com/gpu", 2)
    assert requests == limits and requests["cpu"] == 2000  # Guaranteed QoS, whole CPUs
    assert "nvidia.com/gpu" not in member_quota.container_resources(job, "nvidia.com/gpu", 2, dra=True)[0]


def test_only_the_wanted_namespaces_are_kept_with_their_quotas_and_limits() -> None:
    namespaces = [{"metadata": {"name": n}} for n in ("gpufed-ml", "gpufed-cv", "kube-system")]
    quotas = [
        {
            "metadata": {"name": "gpu", "namespace": "gpufed-ml"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
        },
        {"metadata": {"name": "bad", "namespace": "gpufed-cv"}, "spec": {"hard": {"cpu": "x"}}},
        {"metadata": {"name": "sys", "namespace": "kube-system"}, "spec": {"hard": {"pods": "9"}}},
    ]
    bad: list[str] = []
    found = member_quota.member_namespaces(
        namespaces, quotas, [], lambda n: n.startswith("gpufed-"), lambda n, why: bad.append(n)
    )
    assert [n.name for n in found] == ["gpufed-cv", "gpufed-ml"]
    assert found[1].quotas == (
        QuotaStatus("gpu", {"requests.nvidia.com/gpu": 8}, {"requests.nvidia.com/gpu": 0}),
    )
    assert found[0].quotas == () and bad == ["gpufed-cv/bad"]
