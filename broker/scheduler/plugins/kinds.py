"""Filter: a workload kind goes only to members that serve its API (and, for a TrainJob, hold the
ClusterTrainingRuntime it names), as the member's poller read them from discovery
(ClusterSummary.workload_apis / training_runtimes). A member whose APIs are not read yet is passed over
for now (resolvable); one without the API is unresolvable: "no jobset.x-k8s.io/v1alpha2"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status
from broker.workload.kinds import registry


@dataclass(frozen=True)
class WorkloadKindServed:
    name: ClassVar[str] = "workload-kind"

    def applies(self, job: PreparedJob) -> bool:
        return job.job.workload is not None

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        api = registry.api_of(job.job)
        if not api:
            return options
        if not summary.workload_apis_observed:
            return Status.unschedulable(f"its APIs are not read yet (for {api})")
        if api not in summary.workload_apis:
            return Status.unresolvable(f"no {api}")
        runtime = registry.runtime_of(job.job)
        if runtime is not None and runtime not in summary.training_runtimes:
            return Status.unresolvable(f"no ClusterTrainingRuntime {runtime}")
        return options
