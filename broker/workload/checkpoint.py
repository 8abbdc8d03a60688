"""The checkpoint contract between gpufed and a job (docs/migration.md), as pure data and functions.

A job declares `checkpoint: {gracePeriodSeconds: N}` (a plain Job: the annotation
`gpufed.io/checkpoint-grace-seconds`). Owns what the contract means for a member's objects:

    pod_spec_fields(job)              terminationGracePeriodSeconds = N on the pod template, so whoever
                                      deletes the pods (the broker's stop, the garbage collector after
                                      the Job, kubectl) gives the container SIGTERM and N seconds to save
    resume_env(attempt, resume_from)  the next attempt's GPUFED_ATTEMPT and GPUFED_RESUME_FROM
    termination_reference(pod)        where the container says it saved its state: its termination
                                      message (status.containerStatuses[].state.terminated.message, from
                                      terminationMessagePath), or None
    reported_reference(pod)           the last checkpoint it reported while running (the pod annotation
                                      gpufed.io/checkpoint): what a lost cluster's job resumes from
    grace_of(job) / parse_grace(...)  the declared grace period; a bad value names its field

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.model import JobRequest

__all__ = [
    "ATTEMPT_ENV",
    "CHECKPOINT_ANNOTATION",
    "GRACE_ANNOTATION",
    "MAX_GRACE_SECONDS",
    "MAX_REFERENCE_CHARS",
    "RESUME_ENV",
    "grace_of",
    "parse_grace",
    "pod_spec_fields",
    "reported_reference",
    "resume_env",
    "termination_reference",
]

RESUME_ENV = "GPUFED_RESUME_FROM"
ATTEMPT_ENV = "GPUFED_ATTEMPT"
GRACE_ANNOTATION = "gpufed.io/checkpoint-grace-seconds"  # on a plain batch/v1 Job
CHECKPOINT_ANNOTATION = "gpufed.io/checkpoint"  # on a running pod: its last periodic checkpoint
# A save that needs more than an hour is not a pause; the kubelet's own limit is far higher.
MAX_GRACE_SECONDS = 3600
# The kubelet keeps at most 4096 bytes of a termination message (and 12 KiB for all containers).
MAX_REFERENCE_CHARS = 4096


def parse_grace(value: object, field: str) -> int:
    """A grace period in whole seconds, 1..MAX_GRACE_SECONDS; InvalidRequest names `field` otherwise."""
    if isinstance(value, bool):
        raise InvalidRequest(field, "a whole number of seconds, not true/false")
    if isinstance(value, str):
        text = value.strip()
        if not text.isdigit():
            raise InvalidRequest(field, f"{value!r}: a whole number of seconds")
        value = int(text)
    if not isinstance(value, int):
        raise InvalidRequest(field, f"{value!r}: a whole number of seconds")
    if not 1 <= value <= MAX_GRACE_SECONDS:
        raise InvalidRequest(field, f"{value}: must be between 1 and {MAX_GRACE_SECONDS} seconds")
    return value


def grace_of(job: JobRequest) -> int | None:
    """The job's checkpoint grace period in seconds, or None: it does not checkpoint."""
    return job.checkpoint_grace_seconds


def pod_spec_fields(job: JobRequest) -> dict[str, Any]:
    """What the contract adds to the pod spec: the grace period every deletion of the pods gives."""
    grace = grace_of(job)
    return {} if grace is None else {"terminationGracePeriodSeconds": grace}


def resume_env(attempt: int, resume_from: str | None) -> list[dict[str, str]]:
    """The env vars an attempt's container gets: GPUFED_ATTEMPT always, GPUFED_RESUME_FROM when an
    earlier attempt left a checkpoint reference."""
    env = [{"name": ATTEMPT_ENV, "value": str(attempt)}]
    if resume_from:
        env.append({"name": RESUME_ENV, "value": resume_from})
    return env


def with_resume_env(env: list[dict[str, Any]], attempt: int, resume_from: str | None) -> list[dict[str, Any]]:
    """The container's env with the contract's vars (the job's own of the same names are replaced)."""
    ours = resume_env(attempt, resume_from)
    names = {e["name"] for e in ours}
    return [e for e in env if e.get("name") not in names] + ours


def _clean(text: object) -> str | None:
    if not isinstance(text, str):
        return None
    text = text.strip()
    return text[:MAX_REFERENCE_CHARS] or None


def termination_reference(pod: Mapping[str, Any]) -> str | None:
    """The checkpoint reference a stopped pod left: the first non-empty termination message of its
    containers (state.terminated, else lastState.terminated), or None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        for key in ("state", "lastState"):
            terminated = (cs.get(key) or {}).get("terminated") or {}
            ref = _clean(terminated.get("message"))
            if ref is not None:
                return ref
    return None


def reported_reference(pod: Mapping[str, Any]) -> str | None:
    """The checkpoint a running pod last reported (annotation gpufed.io/checkpoint), or None."""
    return _clean(((pod.get("metadata") or {}).get("annotations") or {}).get(CHECKPOINT_ANNOTATION))
