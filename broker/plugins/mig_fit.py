"""Filter: MIG slices fit (by profile name or by need), on settled nodes only.

Every pod needs its slices on one node (largest free on a node) and the gang needs them all (free).
Narrows the MIG options to the profiles that fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.framework import CycleState, Status
from broker.model import ClusterSummary, JobRequest


@dataclass(frozen=True)
class MigFit:
    name: str = "mig-fit"

    def filter(self, job: JobRequest, summary: ClusterSummary, ctx: CycleState) -> Status:
        mig = [o for o in ctx.options if o.mig is not None]
        if not mig:
            return Status.success()
        per_pod = job.mig_slices_per_pod
        total = per_pod * job.pods
        fits = [
            o
            for o in mig
            if o.mig is not None and o.mig.free >= total and o.mig.largest_free_on_node >= per_pod
        ]
        if fits:
            ctx.options = fits
            return Status.success()
        best = max((o.mig.free for o in mig if o.mig), default=0)
        if any(o.mig is not None and not o.mig.settled for o in mig):
            return Status.unschedulable("MIG being reconfigured, not enough settled slices", best=best)
        profiles = sorted({o.mig_profile or "" for o in mig})
        return Status.unschedulable(f"not enough free MIG {'/'.join(profiles)} slices", best=best)
