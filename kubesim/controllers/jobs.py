"""The simulated Job controller (batch/v1): pods for Jobs, counted to Complete or Failed.

Owns `JobController`: parallelism and completions (NonIndexed, and Indexed with the
`batch.kubernetes.io/job-completion-index` annotation, label and JOB_COMPLETION_INDEX env var), suspend
(active pods removed, condition Suspended, startTime reset on resume), backoffLimit (failed pods counted;
beyond the limit FailureTarget + Failed reason BackoffLimitExceeded), activeDeadlineSeconds
(DeadlineExceeded), and status active/ready/succeeded/failed/terminating/startTime/completionTime/
completedIndexes with SuccessCriteriaMet + Complete reason CompletionsReached. Pods get an owner reference
to the Job (controller, blockOwnerDeletion), the labels batch.kubernetes.io/job-name and
controller-uid (and the legacy job-name/controller-uid), the template's labels and annotations, and
spec.priority from their PriorityClass. Jobs with spec.managedBy other than the built-in controller
are left alone. Not simulated: podFailurePolicy, backoffLimitPerIndex, successPolicy.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import heapq
from datetime import UTC, datetime

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pods import (
    condition_true,
    controller_owner,
    is_terminal,
    key_of,
    phase,
    qos_class,
    replace_field,
    set_condition,
)
from kubesim.store import AlreadyExistsError, NotFoundError, Obj, ObjectStore, WatchEvent, rfc3339

JOBS = "jobs.batch"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_CONTROLLER = "kubernetes.io/job-controller"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(seed: str) -> str:
    digest = hashlib.blake2b(seed.encode(), digest_size=8).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


def format_indexes(indexes: set[int]) -> str:
    """`{0,1,2,3,5}` -> `"0-3,5"` (the completedIndexes format)."""
    out: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def _index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def is_finished(job: Obj) -> bool:
    return condition_true(job, "Complete") or condition_true(job, "Failed")


class JobController:
    """Reconciles the Jobs whose Job or pods changed since the last tick."""

    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self._dirty: set[tuple[str, str]] = set()
        self._pods_by_job: dict[str, set[tuple[str, str]]] = {}
        self._deadlines: list[tuple[float, str, str]] = []
        self._serial = 0
        self._writing = False
        for pod in store.list("pods")[0]:
            self._on_pod(WatchEvent("ADDED", "pods", pod, 0))
        for job in store.list(JOBS)[0]:
            self._dirty.add(key_of(job))
        store.subscribe(JOBS, self._on_job)
        store.subscribe("pods", self._on_pod)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    @property
    def next_due(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    def _on_job(self, event: WatchEvent) -> None:
        if self._writing:
            return
        if event.type == "DELETED":
            self._dirty.discard(key_of(event.obj))
            return
        self._dirty.add(key_of(event.obj))

    def _on_pod(self, event: WatchEvent) -> None:
        owner = controller_owner(event.obj, "Job")
        if owner is None:
            return
        key = key_of(event.obj)
        pods = self._pods_by_job.setdefault(owner.get("uid", ""), set())
        if event.type == "DELETED":
            pods.discard(key)
        else:
            pods.add(key)
        self._dirty.add((key[0], owner.get("name", "")))

    def tick(self) -> None:
        now = self._clock.now()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, ns, name = heapq.heappop(self._deadlines)
            self._dirty.add((ns, name))
        if not self._dirty:
            return
        keys, self._dirty = self._dirty, set()
        for ns, name in sorted(keys):
            job = self._store.find(JOBS, ns, name)
            if job is not None:
                self._reconcile(job, now)

    # ------------------------------------------------------------------ reconcile

    def _reconcile(self, job: Obj, now: float) -> None:
        spec = job.get("spec") or {}
        if spec.get("managedBy") not in (None, "", JOB_CONTROLLER):
            return
        ns, name = key_of(job)
        uid = job["metadata"].get("uid", "")
        pods = [
            p
            for k in sorted(self._pods_by_job.get(uid, ()))
            if (p := self._store.find("pods", *k)) is not None
        ]
        active = [p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
        succeeded = [p for p in pods if phase(p) == "Succeeded"]
        failed = [p for p in pods if phase(p) == "Failed"]
        work = copy.deepcopy(job)
        status = work.setdefault("status", {})

        if is_finished(job):
            if condition_true(job, "Failed"):
                self._delete_pods(active)
            return

        parallelism = int(spec.get("parallelism", 1))
        raw_completions = spec.get("completions")
        completions: int | None = None if raw_completions is None else int(raw_completions)
        if completions is None and "parallelism" not in spec:
            completions = 1
        indexed = spec.get("completionMode") == "Indexed" and completions is not None
        backoff_limit = int(spec.get("backoffLimit", 6))
        ts = rfc3339(now)

        if spec.get("suspend"):
            self._delete_pods(active)
            active = []
            set_condition(work, "Suspended", "True", now, "JobSuspended", "Job suspended")
        else:
            if condition_true(job, "Suspended"):
                set_condition(work, "Suspended", "False", now, "JobResumed", "Job resumed")
                status["startTime"] = ts
            if not status.get("startTime"):
                status["startTime"] = ts
            deadline = spec.get("activeDeadlineSeconds")
            started = _epoch(status["startTime"], now)
            if deadline is not None and started + float(deadline) > now:
                heapq.heappush(self._deadlines, (started + float(deadline), ns, name))
            succeeded_indexes = {
                i for p in succeeded if (i := _index(p)) is not None and i < (completions or 0)
            }
            if completions is None:
                done = bool(succeeded) and not active
            else:
                done = (len(succeeded_indexes) if indexed else len(succeeded)) >= completions
            if len(failed) > backoff_limit:
                self._fail(work, now, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
                self._delete_pods(active)
                active = []
            elif deadline is not None and now >= started + float(deadline):
                self._fail(work, now, "DeadlineExceeded", "Job was active longer than specified deadline")
                self._delete_pods(active)
                active = []
            elif done:
                message = "Reached expected number of succeeded pods"
                set_condition(work, "SuccessCriteriaMet", "True", now, "CompletionsReached", message)
                set_condition(work, "Complete", "True", now, "CompletionsReached", message)
                status["completionTime"] = ts
                self._delete_pods(active)
                active = []
                self._events.record(job, "Completed", "Job completed", "Normal", "job-controller")
            elif indexed and completions is not None:
                busy = {i for p in active if (i := _index(p)) is not None}
                want = [i for i in range(completions) if i not in succeeded_indexes and i not in busy]
                for i in want[: max(0, parallelism - len(active))]:
                    active.append(self._create_pod(job, i))
            else:
                if completions is None:
                    missing = 0 if succeeded else parallelism - len(active)
                else:
                    missing = min(parallelism, completions - len(succeeded)) - len(active)
                for _ in range(max(0, missing)):
                    active.append(self._create_pod(job, None))
            if indexed:
                status["completedIndexes"] = format_indexes(succeeded_indexes)

        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if condition_true(p, "Ready"))
        status["succeeded"] = len(succeeded)
        status["failed"] = len(failed)
        status["terminating"] = 0
        status["uncountedTerminatedPods"] = {}
        for field in ("active", "succeeded", "failed"):
            if not status[field]:
                status.pop(field)  # omitempty, as the API server serialises them
        if status != (job.get("status") or {}):
            self._writing = True
            try:
                self._store.mutate(JOBS, ns, name, replace_field("status", status))
            except NotFoundError:
                pass
            finally:
                self._writing = False

    def _fail(self, work: Obj, now: float, reason: str, message: str) -> None:
        set_condition(work, "FailureTarget", "True", now, reason, message)
        set_condition(work, "Failed", "True", now, reason, message)
        self._events.record(work, reason, message, "Warning", "job-controller")

    def _delete_pods(self, pods: list[Obj]) -> None:
        for pod in pods:
            with contextlib.suppress(NotFoundError):
                self._store.delete("pods", *key_of(pod))

    def _create_pod(self, job: Obj, index: int | None) -> Obj:
        ns, job_name = key_of(job)
        uid = job["metadata"].get("uid", "")
        template = (job.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        labels = dict(tmeta.get("labels") or {})
        annotations = dict(tmeta.get("annotations") or {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": job_name,
                "controller-uid": uid,
                "job-name": job_name,
            }
        )
        prefix = f"{job_name}-"
        if index is not None:
            labels[INDEX_KEY] = str(index)
            annotations[INDEX_KEY] = str(index)
            prefix = f"{job_name}-{index}-"
            for c in spec.get("containers") or ():
                c["env"] = [*(c.get("env") or []), {"name": "JOB_COMPLETION_INDEX", "value": str(index)}]
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Never")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        pc_name = spec.get("priorityClassName")
        if pc_name and spec.get("priority") is None:
            pc = self._store.find("priorityclasses.scheduling.k8s.io", "", pc_name)
            if pc is not None:
                spec["priority"] = int(pc.get("value") or 0)
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": prefix,
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }
        pod["status"]["qosClass"] = qos_class(pod)
        while True:
            self._serial += 1
            pod["metadata"]["name"] = prefix + _suffix(f"{uid}/{self._serial}")
            try:
                created = self._store.create("pods", pod)
                break
            except AlreadyExistsError:
                continue
        self._events.record(
            job, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}", "Normal", "job-controller"
        )
        return created


def _epoch(ts: str, default: float) -> float:
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        return default
