"""Pure member-trouble rules: what a Job's pods and the Job controller's events say went wrong inside
the member cluster, and what the broker does about it.

    pod_trouble(pod)          one pod's trouble in the member's words (PodTrouble) or None: PodScheduled=False
                              Unschedulable (the scheduler's message), a waiting container (ErrImagePull,
                              ImagePullBackOff, InvalidImageName, CreateContainerConfigError,
                              CreateContainerError, CrashLoopBackOff), OOMKilled, an eviction
    pod_termination(pod)      a container's last failed termination (reason, exit code) or None
    failed_create(event)      a Job controller FailedCreate event (an admission refusal) as PodTrouble
    worst(troubles)           the one a job's reason shows (the most severe; a FailedCreate only when
                              no pod says anything)
    judge(record, trouble, since, now, policy)
                              NOTE (the reason shows it), WITHDRAW (delete the attempt, keep the cluster
                              away from this job for a while, requeue) or FAIL:
        Unschedulable, FailedCreate   WITHDRAW after memberPendingSeconds
        image pull errors             FAIL after imagePullFailSeconds with the registry's message, or
                                      WITHDRAW when the job asked `onImagePullFailure: requeue`
        anything else                 NOTE (a crash ends the Job by its backoffLimit: lifecycle's FAILED,
                                      with the last termination added by failed_reason)
    deadline(trouble, since, policy)   when judge would act (the controller looks again then)

No I/O, no clock: `now` and `since` (when the broker first saw this trouble of this attempt) are arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from broker.core.model import ImagePullFailure, JobRecord
from broker.core.workloads import PodTrouble, Termination

__all__ = [
    "PENDING_KINDS",
    "PULL_KINDS",
    "Act",
    "TroublePolicy",
    "Verdict",
    "avoided",
    "deadline",
    "failed_create",
    "failed_reason",
    "group",
    "judge",
    "pod_termination",
    "pod_trouble",
    "trouble_reason",
    "worst",
]

# Pods that cannot be placed or created in the member: another cluster may take them.
PENDING_KINDS = frozenset({"Unschedulable", "FailedCreate"})
# The image cannot be pulled: every cluster would pull the same image.
PULL_KINDS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
_WAITING_KINDS = PULL_KINDS | {"CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff"}
# worst first: what the job's reason shows when pods disagree
_SEVERITY = (
    "Evicted",
    "OOMKilled",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "ErrImagePull",
    "ImagePullBackOff",
    "Unschedulable",
    "FailedCreate",
)
_RANK = {k: i for i, k in enumerate(_SEVERITY)}
# the text the broker puts before a member's own words in a job's reason
TROUBLE_PREFIX = "member trouble on "


class Act(StrEnum):
    NOTE = "note"  # the reason shows it; nothing else yet
    WITHDRAW = "withdraw"  # delete the attempt, avoid the cluster for this job, requeue
    FAIL = "fail"  # delete the attempt, FAILED


@dataclass(frozen=True)
class TroublePolicy:
    """The settings (docs/health.md): memberPendingSeconds, imagePullFailSeconds, memberAvoidSeconds."""

    member_pending_seconds: float = 120.0
    image_pull_fail_seconds: float = 300.0
    avoid_seconds: float = 600.0


@dataclass(frozen=True)
class Verdict:
    act: Act
    reason: str


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _name(pod: Mapping[str, Any]) -> str:
    return str(_dict(pod.get("metadata")).get("name") or "")


def _container_statuses(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        _dict(c) for c in _list(status.get("initContainerStatuses")) + _list(status.get("containerStatuses"))
    ]


def pod_trouble(pod: Mapping[str, Any]) -> PodTrouble | None:
    """The pod's trouble in the member's words, the worst one first; None when it says nothing wrong."""
    status = _dict(pod.get("status"))
    name = _name(pod)
    found: list[PodTrouble] = []
    if status.get("reason") == "Evicted":
        found.append(PodTrouble("Evicted", str(status.get("message") or ""), name))
    for cs in _container_statuses(status):
        waiting = _dict(_dict(cs.get("state")).get("waiting"))
        reason = str(waiting.get("reason") or "")
        if reason in _WAITING_KINDS:
            message = str(waiting.get("message") or "")
            if reason == "CrashLoopBackOff" and (t := _terminated(cs, "lastState")) is not None:
                message = f"{message} (last: {t.reason}, exit code {t.exit_code})".strip()
            found.append(PodTrouble(reason, message, name))
        for where in ("state", "lastState"):
            t = _terminated(cs, where)
            if t is not None and t.reason == "OOMKilled":
                found.append(
                    PodTrouble(
                        "OOMKilled", f"container {t.container} was OOMKilled (exit code {t.exit_code})", name
                    )
                )
    # bound, or nominated (victims of the member's own preemption are going): not stuck
    if not _dict(pod.get("spec")).get("nodeName") and not status.get("nominatedNodeName"):
        for cond in _list(status.get("conditions")):
            c = _dict(cond)
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"
            ):
                found.append(PodTrouble("Unschedulable", str(c.get("message") or ""), name))
    return worst(found)


def _terminated(cs: Mapping[str, Any], where: str) -> Termination | None:
    t = _dict(_dict(cs.get(where)).get("terminated"))
    if not t:
        return None
    try:
        code = int(t.get("exitCode") or 0)
    except (TypeError, ValueError):
        return None
    if code == 0 and t.get("reason") != "OOMKilled":
        return None
    return Termination(str(t.get("reason") or "Error"), code, container=str(cs.get("name") or ""))


def pod_termination(pod: Mapping[str, Any]) -> Termination | None:
    """The pod's last failed container termination (its current state first, then lastState), or None."""
    for cs in _container_statuses(_dict(pod.get("status"))):
        for where in ("state", "lastState"):
            t = _terminated(cs, where)
            if t is not None:
                return Termination(t.reason, t.exit_code, _name(pod), t.container)
    return None


def failed_create(event: Mapping[str, Any]) -> PodTrouble | None:
    """A Job controller's FailedCreate Warning (an admission refusal: "Error creating: pods "x" is
    forbidden: ..."), or None for any other event."""
    if event.get("reason") != "FailedCreate" or _dict(event.get("involvedObject")).get("kind") != "Job":
        return None
    return PodTrouble("FailedCreate", str(event.get("message") or ""))


def worst(troubles: Iterable[PodTrouble | None]) -> PodTrouble | None:
    """The trouble a job's reason shows: the most severe (by _SEVERITY), then the first pod by name."""
    found = [t for t in troubles if t is not None]
    if not found:
        return None
    return min(found, key=lambda t: (_RANK.get(t.kind, len(_RANK)), t.pod, t.message))


def group(kind: str) -> str:
    """Troubles that follow each other in one spell count as one (ErrImagePull and ImagePullBackOff
    alternate while the kubelet backs off): "pending", "pull", or the kind itself."""
    if kind in PENDING_KINDS:
        return "pending"
    if kind in PULL_KINDS:
        return "pull"
    return kind


def trouble_reason(cluster: str, trouble: PodTrouble) -> str:
    """The job's reason while its member reports trouble."""
    text = f"{TROUBLE_PREFIX}{cluster}: {trouble.kind}"
    return f"{text}: {trouble.message}" if trouble.message else text


def _limit(trouble: PodTrouble, policy: TroublePolicy) -> float | None:
    g = group(trouble.kind)
    if g == "pending":
        return policy.member_pending_seconds
    if g == "pull":
        return policy.image_pull_fail_seconds
    return None


def deadline(trouble: PodTrouble, since: float, policy: TroublePolicy) -> float | None:
    """When judge acts on this trouble first seen at `since` (None: it only notes it)."""
    limit = _limit(trouble, policy)
    return None if limit is None else since + limit


def judge(record: JobRecord, trouble: PodTrouble, since: float, now: float, policy: TroublePolicy) -> Verdict:
    """What to do about a placed job whose member reports `trouble`, first seen at `since`."""
    where = record.cluster or "?"
    said = trouble_reason(where, trouble)
    limit = _limit(trouble, policy)
    if limit is None or now - since < limit:
        return Verdict(Act.NOTE, said)
    lasted = f"{now - since:.0f} s"
    if group(trouble.kind) == "pending":
        return Verdict(
            Act.WITHDRAW, f"withdrawn from {where} after {lasted}: {trouble.kind}: {trouble.message}"
        )
    if record.request.on_image_pull_failure is ImagePullFailure.REQUEUE:
        return Verdict(
            Act.WITHDRAW,
            f"withdrawn from {where} after {lasted} (onImagePullFailure: requeue): "
            f"{trouble.kind}: {trouble.message}",
        )
    return Verdict(Act.FAIL, f"image pull failed on {where} for {lasted}: {trouble.kind}: {trouble.message}")


def failed_reason(reason: str, termination: Termination | None) -> str:
    """A FAILED reason with the last termination's reason and exit code, when the pods told one."""
    if termination is None or f"exit code {termination.exit_code}" in reason:
        return reason
    who = f"container {termination.container} " if termination.container else ""
    return f"{reason} (last termination: {who}{termination.reason}, exit code {termination.exit_code})"


def avoided(record: JobRecord, now: float) -> tuple[str, ...]:
    """The clusters this job is kept away from at `now` (attempts withdrawn from them lately), sorted."""
    return tuple(sorted({c for c, until in record.avoid if until > now}))


def avoid(
    record: JobRecord, cluster: str, now: float, policy: TroublePolicy
) -> tuple[tuple[str, float], ...]:
    """The record's avoid list with `cluster` kept away until now + avoid_seconds (expired ones dropped)."""
    kept = {c: until for c, until in record.avoid if until > now and c != cluster}
    kept[cluster] = now + policy.avoid_seconds
    return tuple(sorted(kept.items()))
