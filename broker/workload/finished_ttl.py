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
    if seconds is None:
        return
    job.setdefault("spec", {})["ttlSecondsAfterFinished"] = int(seconds)
