"""Finished Jobs leave the member clusters on their own (issue 21, case 9).

Every Job the broker creates carries `spec.ttlSecondsAfterFinished` (settings.finishedJobTtlSeconds,
default one hour): the member's TTL-after-finished controller deletes it that long after it completed
or failed, so member etcd does not grow without bound and a rebuild after a Redis loss does not reload
every job ever run. The broker reads a job's end long before that (its Job informer). None keeps them.
Until the TTL runs out, a Job whose end the broker has recorded carries gpufed.io/closed ("SUCCEEDED at
<epoch>", written by the status sync through broker.core.ports.WorkloadCloser), and a rebuild after a
Redis loss skips it (broker.ha.recovery.newest_attempts).

    apply(job, seconds)   sets the field on a batch/v1 Job manifest (in place)
"""

from __future__ import annotations

from typing import Any


def apply(job: dict[str, Any], seconds: int | None) -> None:
    """Also on the workload kinds that have the field: JobSet (spec), PyTorchJob (spec.runPolicy), RayJob
    (spec, only with shutdownAfterJobFinishes, as KubeRay requires); a TrainJob has none."""
    if seconds is None:
        return
    kind = job.get("kind", "Job")
    spec = job.setdefault("spec", {})
    if kind in ("Job", "JobSet"):
        spec["ttlSecondsAfterFinished"] = int(seconds)
    elif kind == "PyTorchJob":
        spec.setdefault("runPolicy", {}).setdefault("ttlSecondsAfterFinished", int(seconds))
    elif kind == "RayJob" and spec.get("shutdownAfterJobFinishes"):
        spec.setdefault("ttlSecondsAfterFinished", int(seconds))
