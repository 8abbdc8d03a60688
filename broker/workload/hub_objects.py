"""kubectl-native submission through a hub (MultiKueue's convention): what a hub object means to the broker.

Owns, purely:
    WATCHED_KINDS       the ONE list of kinds the hub watcher follows (group, version, plural, kind);
                        a kind the hub does not serve is skipped until it does (adapters.hub_watcher)
    MANAGED_BY          spec.managedBy of the hub objects that are gpufed's ("gpufed.io/broker")
    HubRef              one hub object: its kind, namespace, name and uid; `source` is what the REST view
                        shows ("hub:jobs.batch/team-a/train")
    tenant_of           the tenant of a hub namespace (a configured mapping; default the namespace's name)
    submission_of       the manifest the broker submits for a hub object, as `POST /v1/jobs` takes it:
                        what the API server wrote (status, uid, resourceVersion, managedFields, the
                        server's defaults of a batch/v1 Job) and spec.managedBy left out, so the member
                        copy is an ordinary object its own controller runs
    hub_annotations     the annotations written back: gpufed.io/job-id, gpufed.io/cluster, gpufed.io/state
    hub_status          the status written back to the hub object: the member object's .status as it is
                        (conditions, counters, startTime/completionTime; generic over kinds), or, with no
                        member object to read, terminal conditions for a job that ended
    refused_status      a hub object the broker refuses: a Failed condition whose message names the field
    queued_message      the reason a held hub object's QUEUED_CONDITION gives (hub_status writes it while
                        the job is queued, False once placed, replaced by the member's status)

Times come in as RFC 3339 strings from the caller (no clock here).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.core.errors import InvalidRequest
from broker.core.k8s_names import CLUSTER_ANNOTATION, JOB_ID_LABEL

__all__ = [
    "MANAGED_BY",
    "STATE_ANNOTATION",
    "WATCHED_KINDS",
    "HubRef",
    "WatchedKind",
    "annotations_of",
    "hub_annotations",
    "hub_status",
    "is_finished",
    "is_managed",
    "kind_of",
    "queued_message",
    "reason_shape",
    "ref_of",
    "refused_status",
    "submission_of",
    "tenant_of",
]

MANAGED_BY = "gpufed.io/broker"
JOB_ANNOTATION = JOB_ID_LABEL  # gpufed.io/job-id: the job the hub object became
STATE_ANNOTATION = "gpufed.io/state"  # QUEUED, PLACED, ... as GET /v1/jobs/{id} says
TENANT_ANNOTATION = "gpufed.io/tenant"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
REFUSED_REASON = "GpufedRefused"
# The condition a hub object carries while gpufed holds its job (MultiKueue's users see their Workload's
# QuotaReserved/Admitted; the hub object has no Workload beside it): True with the queue's reason as its
# message while QUEUED, False once placed; the member's status replaces it when there is one to mirror.
QUEUED_CONDITION = "gpufed.io/Queued"
QUEUED_REASON = "WaitingForPlacement"
PLACED_REASON = "Placed"
SUSPENDED = "Suspended"  # a batch/v1 Job's own condition type (kubectl's STATUS column reads it)
SUSPENDED_REASON = "GpufedQueued"
# What the broker writes on a hub object: never part of what it submits.
WRITTEN_BACK = (JOB_ANNOTATION, CLUSTER_ANNOTATION, STATE_ANNOTATION)


@dataclass(frozen=True)
class WatchedKind:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """plural.group, as kubectl names it (jobs.batch)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection (every namespace when namespace is None) or of one object."""
        base = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        if namespace is None:
            return f"{base}/{self.plural}"
        path = f"{base}/namespaces/{namespace}/{self.plural}"
        return path if name is None else f"{path}/{name}"


# The kinds a hub object may be (issue 23): batch/v1 Job here; the others work once the broker accepts
# them at POST /v1/jobs, without a change to the watcher.
WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("batch", "v1", "jobs", "Job"),
    WatchedKind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    WatchedKind("ray.io", "v1", "rayjobs", "RayJob"),
    WatchedKind("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    WatchedKind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
)
BATCH_JOB = WATCHED_KINDS[0]


def kind_of(resource: str) -> WatchedKind | None:
    """The watched kind of a `plural.group` name (a HubRef's source), None if not watched."""
    for k in WATCHED_KINDS:
        if k.resource == resource:
            return k
    return None


@dataclass(frozen=True)
class HubRef:
    kind: WatchedKind
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind.resource, self.namespace, self.name)

    @property
    def source(self) -> str:
        return f"hub:{self.kind.resource}/{self.namespace}/{self.name}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def ref_of(obj: Mapping[str, Any], kind: WatchedKind) -> HubRef | None:
    meta = _meta(obj)
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not (isinstance(name, str) and isinstance(namespace, str) and isinstance(uid, str) and uid):
        return None
    return HubRef(kind, namespace, name, uid)


def is_managed(obj: Mapping[str, Any]) -> bool:
    """The object is gpufed's: spec.managedBy is gpufed.io/broker (its own controller leaves it alone)."""
    return _spec(obj).get("managedBy") == MANAGED_BY


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    raw = _meta(obj).get("annotations")
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def tenant_of(namespace: str, mapping: Mapping[str, str]) -> str:
    """The tenant of a hub namespace: the configured mapping, else the namespace's own name."""
    return mapping.get(namespace, namespace)


# --------------------------------------------------------------------------- submission

_SERVER_META = ("name", "namespace", "labels", "annotations")
# What the API server writes into a batch/v1 Job on create (its defaulting), read as "unset": the broker
# writes these itself in the member copy. A value other than the default is kept, and the Job's
# translation (broker.workload.k8s_job) refuses what it cannot honour, naming the field.
_JOB_SPEC_DEFAULTS: dict[str, tuple[object, ...]] = {
    "suspend": (False,),
    "manualSelector": (False,),
    "podReplacementPolicy": ("TerminatingOrFailed", "Failed"),
    "backoffLimit": (6,),  # the server's default; each attempt runs once (the broker retries by failover)
}
_CONTROLLER_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)
_POD_DEFAULTS: dict[str, tuple[object, ...]] = {
    "schedulerName": ("default-scheduler",),
    "terminationGracePeriodSeconds": (30,),
    "dnsPolicy": ("ClusterFirst",),
    "securityContext": ({},),
}
_CONTAINER_DEFAULTS: dict[str, tuple[object, ...]] = {
    "terminationMessagePath": ("/dev/termination-log",),
    "terminationMessagePolicy": ("File",),
}


def _drop_defaults(obj: dict[str, Any], defaults: Mapping[str, tuple[object, ...]]) -> None:
    for key, values in defaults.items():
        if key in obj and obj[key] in values:
            del obj[key]


def _strip_job_defaults(spec: dict[str, Any]) -> None:
    _drop_defaults(spec, _JOB_SPEC_DEFAULTS)
    spec.pop("selector", None)  # generated from the Job's uid
    template = spec.get("template")
    if not isinstance(template, dict):
        return
    tmeta = template.get("metadata")
    if isinstance(tmeta, dict):
        labels = tmeta.get("labels")
        if isinstance(labels, dict):
            for key in _CONTROLLER_LABELS:
                labels.pop(key, None)
            if not labels:
                tmeta.pop("labels")
        if not tmeta:
            template.pop("metadata")
    pod = template.get("spec")
    if not isinstance(pod, dict):
        return
    _drop_defaults(pod, _POD_DEFAULTS)
    for container in pod.get("containers") or []:
        if isinstance(container, dict):
            _drop_defaults(container, _CONTAINER_DEFAULTS)
            image = str(container.get("image") or "")
            tagless = image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]
            if container.get("imagePullPolicy") == ("Always" if tagless else "IfNotPresent"):
                del container["imagePullPolicy"]  # the server's default for that image


def submission_of(obj: Mapping[str, Any], kind: WatchedKind, tenant: str) -> dict[str, Any]:
    """The manifest submitted for a hub object: apiVersion, kind, the user's metadata (name, namespace,
    labels, annotations but the ones the broker writes back and kubectl's last-applied copy) and spec
    without managedBy (and, for a batch/v1 Job, without what the API server defaulted). A
    gpufed.io/tenant annotation naming another tenant than the namespace's is refused."""
    meta = _meta(obj)
    out_meta: dict[str, Any] = {k: copy.deepcopy(meta[k]) for k in _SERVER_META if k in meta}
    notes = {k: v for k, v in annotations_of(obj).items() if k not in WRITTEN_BACK and k != LAST_APPLIED}
    named = notes.pop(TENANT_ANNOTATION, None)
    if named is not None and named != tenant:
        raise InvalidRequest(
            f"metadata.annotations[{TENANT_ANNOTATION}]",
            f"the hub namespace {meta.get('namespace')} is tenant {tenant}, not {named}",
        )
    if notes:
        out_meta["annotations"] = notes
    else:
        out_meta.pop("annotations", None)
    spec = copy.deepcopy(dict(_spec(obj)))
    spec.pop("managedBy", None)
    if kind == BATCH_JOB:
        _strip_job_defaults(spec)
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": out_meta, "spec": spec}


# --------------------------------------------------------------------------- write-back


def hub_annotations(job_id: str, state: str, cluster: str | None) -> dict[str, str]:
    """The annotations the broker keeps on a hub object: which job it is, its state, where it runs."""
    out = {JOB_ANNOTATION: job_id, STATE_ANNOTATION: state}
    if cluster:
        out[CLUSTER_ANNOTATION] = cluster
    return out


def _conditions(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = status.get("conditions")
    return [c for c in raw if isinstance(c, Mapping)] if isinstance(raw, list) else []


def is_finished(status: Mapping[str, Any] | None) -> bool:
    """The hub object's status says it ended (a Complete, Succeeded or Failed condition that is True)."""
    if not isinstance(status, Mapping):
        return False
    return any(
        c.get("type") in ("Complete", "Completed", "Succeeded", "Failed") and c.get("status") == "True"
        for c in _conditions(status)
    )


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _terminal(
    kind: WatchedKind, succeeded: bool, reason: str, message: str, now: str
) -> list[dict[str, str]]:
    """The conditions that end an object, as its controller writes them (a batch/v1 Job: the target
    condition first, SuccessCriteriaMet or FailureTarget, then Complete or Failed)."""
    if succeeded:
        done = "Complete" if kind == BATCH_JOB else "Completed"
        first = [_condition("SuccessCriteriaMet", reason, message, now)] if kind == BATCH_JOB else []
        return [*first, _condition(done, reason, message, now)]
    first = [_condition("FailureTarget", reason, message, now)] if kind == BATCH_JOB else []
    return [*first, _condition("Failed", reason, message, now)]


def hub_status(
    kind: WatchedKind,
    state: str,
    reason: str,
    member: Mapping[str, Any] | None,
    current: Mapping[str, Any] | None,
    now: str,
) -> dict[str, Any] | None:
    """The status to write on the hub object, or None when it should stay as it is.

    `member` is the member object's .status (None when there is no member object to read: queued, or
    deleted since); `state` and `reason` are the job's. The member's status is mirrored as it is, but its
    uncountedTerminatedPods (the member's pod uids); a job that ended with nothing to read gets the
    terminal conditions (SUCCEEDED: Complete; FAILED, CANCELLED: Failed, with the broker's reason); a hub
    object that already ended keeps its status."""
    have = dict(current or {})
    if is_finished(have):
        return None
    if member is not None:
        want = {k: copy.deepcopy(v) for k, v in member.items() if k != "uncountedTerminatedPods"}
        return want if want != have else None
    if state not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        return _held(kind, have, state, reason, now)
    want = dict(have)
    succeeded = state == "SUCCEEDED"
    cause = {"SUCCEEDED": "Completed", "FAILED": "GpufedFailed", "CANCELLED": "GpufedCancelled"}[state]
    want["conditions"] = [
        *(c for c in _conditions(have) if c.get("type") not in ("SuccessCriteriaMet", "FailureTarget")),
        *_terminal(kind, succeeded, cause, reason or state.lower(), now),
    ]
    if succeeded and kind == BATCH_JOB:
        want.setdefault("startTime", now)
        want["completionTime"] = now
    return want


def _held(
    kind: WatchedKind, have: Mapping[str, Any], state: str, reason: str, now: str
) -> dict[str, Any] | None:
    """The status of a hub object whose job gpufed holds (no member object to mirror yet): the
    QUEUED_CONDITION, True with the queue's reason while QUEUED, False once placed; None when it already
    says so. Its lastTransitionTime moves only when its status does (a new reason is a new message). A
    batch/v1 Job also gets the Job's own Suspended condition beside it (True while queued: no pods run
    anywhere), the one `kubectl get jobs` reads, as it shows a Job Kueue holds: `Suspended`, not `Running`."""
    queued = state == "QUEUED"
    status = "True" if queued else "False"
    message = reason or ("waiting for placement" if queued else state.lower())
    old = next((c for c in _conditions(have) if c.get("type") == QUEUED_CONDITION), None)
    if not queued and (old is None or old.get("status") != "True"):
        return None  # never said queued, or said placed already: nothing to correct
    if old is not None and (old.get("status"), old.get("message")) == (status, message):
        return None
    kinds = {QUEUED_CONDITION: QUEUED_REASON if queued else PLACED_REASON}
    if kind == BATCH_JOB:
        kinds[SUSPENDED] = SUSPENDED_REASON if queued else PLACED_REASON
    mine = {c.get("type"): c for c in _conditions(have) if c.get("type") in kinds}
    conditions = []
    for ctype, why in kinds.items():
        before = mine.get(ctype)
        since = (
            before.get("lastTransitionTime")
            if before is not None and before.get("status") == status
            else None
        )
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "reason": why,
                "message": message,
                "lastProbeTime": now,
                "lastTransitionTime": since or now,
            }
        )
    want = dict(have)
    want["conditions"] = [*(c for c in _conditions(have) if c.get("type") not in kinds), *conditions]
    return want


def reason_shape(message: str | None) -> str | None:
    """A queue reason with its numbers left out: an Event is told when this changes, not when only a
    count moves ("best: 6 on c1" -> "best: 7 on c1"), as an event recorder folds similar events."""
    return None if message is None else re.sub(r"\d+(\.\d+)?", "#", message)


def queued_message(status: Mapping[str, Any] | None) -> str | None:
    """The message of a status's QUEUED_CONDITION when it is True (the job is held queued), else None."""
    if not isinstance(status, Mapping):
        return None
    for c in _conditions(status):
        if c.get("type") == QUEUED_CONDITION and c.get("status") == "True":
            return str(c.get("message") or "")
    return None


def refused_status(
    kind: WatchedKind, current: Mapping[str, Any] | None, field: str, message: str, now: str
) -> dict[str, Any]:
    """A refused hub object's status: Failed (with FailureTarget before it on a batch/v1 Job), reason
    GpufedRefused, the message naming the field ("spec.template.spec.containers[0].image: required")."""
    status = dict(current or {})
    text = f"{field}: {message}" if field else message
    status["conditions"] = [*_conditions(status), *_terminal(kind, False, REFUSED_REASON, text, now)]
    return status
