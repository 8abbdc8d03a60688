"""Filter: MIG slices fit (by profile name or by need), on settled nodes only.

Every pod needs its slices on one node (largest free on a node) and the gang needs them all (free).
Narrows the MIG options to the profiles that fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from broker.core.model import ClusterSummary, ClusterTraits
from broker.scheduler.framework import FilterResult, PreparedJob, RunOption, Status


@dataclass(frozen=True)
class MigFit:
    name: ClassVar[str] = "mig-fit"

    def applies(self, job: PreparedJob) -> bool:
        return job.job.wants_mig

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        mig = [o for o in options if o.mig is not None]
        if not mig:
            return options
        per_pod = job.job.mig_slices_per_pod
        total = per_pod * job.job.pods
        fits = [
            o
            for o in mig
            if o.mig is not None and o.mig.free >= total and o.mig.largest_free_on_node >= per_pod
        ]
        if fits:
            return options if len(fits) == len(options) else fits
        best = max((o.mig.free for o in mig if o.mig), default=0)
        if any(o.mig is not None and not o.mig.settled for o in mig):
            return Status.unschedulable("MIG being reconfigured, not enough settled slices", best=best)
        profiles = sorted({o.mig_profile or "" for o in mig})
        return Status.unschedulable(f"not enough free MIG {'/'.join(profiles)} slices", best=best)
