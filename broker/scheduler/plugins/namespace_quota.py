"""Filter: the tenant's namespace in the cluster can take the job (ResourceQuota and LimitRange).

Where the pollers watch the cluster's namespaces (summary.namespaces_observed), the job's namespace there
(traits.namespace_for(tenant)) must exist unless the broker may create it; each of the cluster's options
must pass the namespace's LimitRange (its pod as LimitRanger defaults and bounds it) and its
ResourceQuotas (used + need <= hard, from the quota's status). An option that fails is dropped; when all
fail, the first failure is the reason ("quota gpufed-ml: nvidia.com/gpu 14/16, job needs 4"). So a Job
the member cluster's quota would refuse is never created there: the job goes to another cluster, or
waits with the reason.

Codes: a quota that could take the job once used goes down is UNSCHEDULABLE; a missing namespace the
broker may not create, a LimitRange that refuses the pod, and a need above the quota's hard are
UNSCHEDULABLE_AND_UNRESOLVABLE (nothing freeing up helps; the operator changes the namespace). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status
from broker.tenancy import member_quota

__all__ = ["NamespaceQuota"]


@dataclass(frozen=True)
class NamespaceQuota:
    name: ClassVar[str] = "namespace-quota"

    def applies(self, job: PreparedJob) -> bool:
        return True

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        if traits is None or not summary.namespaces_observed:
            return options
        name = traits.namespace_for(job.job.tenant)
        namespace = summary.namespace(name)
        if namespace is None:
            if traits.create_namespaces:
                return options  # created on first use, without quota or limits yet
            return Status.unresolvable(f"namespace {name} missing (the broker may not create it)")
        if not namespace.quotas and not namespace.limits:
            return options
        kept: list[RunOption] = []
        first: Status | None = None
        for o in options:
            requests, limits = member_quota.effective_pod(
                job.job, o.resource_name, o.units_per_pod, namespace, o.dra
            )
            refused = member_quota.limit_range_refusal(requests, limits, namespace.limits)
            if refused is not None:
                first = first or Status.unresolvable(f"limits {name}: {refused}")
                continue
            refused = member_quota.quota_refusal(namespace, requests, limits, job.job.pods)
            if refused is not None:
                usage = member_quota.quota_usage(requests, limits, job.job.pods)
                never = any(usage.get(k, 0) > hard for q in namespace.quotas for k, hard in q.hard.items())
                first = first or (Status.unresolvable(refused) if never else Status.unschedulable(refused))
                continue
            kept.append(o)
        if kept:
            return options if len(kept) == len(options) else kept
        return first or options
