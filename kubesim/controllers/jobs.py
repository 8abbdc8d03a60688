"""The simulated Job controller (batch/v1): pods for Jobs, tracked to Complete or Failed.

Owns `JobController`. Pods are created with the `batch.kubernetes.io/job-tracking` finalizer, an owner
reference to the Job (controller, blockOwnerDeletion), the labels batch.kubernetes.io/job-name and
controller-uid (and the legacy job-name/controller-uid), the template's labels and annotations, and
spec.priority from their PriorityClass. Counting follows the real controller's job-tracking scheme: a
finished pod's uid goes to status.uncountedTerminatedPods, its finalizer is removed, then it is added to
status.succeeded / status.failed (or completedIndexes), so the counters never go down when pods are
deleted. A pod being deleted that is not Succeeded counts as failed (with a podFailurePolicy only once
it is Failed). Jobs with spec.managedBy other than the built-in controller are left alone.

Behaviour: parallelism and completions (NonIndexed; Indexed with the batch.kubernetes.io/
job-completion-index annotation, label and JOB_COMPLETION_INDEX env var); podReplacementPolicy
(TerminatingOrFailed, or Failed: no replacement while a pod terminates); suspend (active pods lose their
tracking finalizer and are deleted, so they never count as failed; Suspended, startTime reset on resume); backoffLimit over failed pods and, for restartPolicy OnFailure,
over container restarts (BackoffLimitExceeded); podFailurePolicy (FailJob -> PodFailurePolicy, Ignore
not counted, Count, FailIndex); backoffLimitPerIndex with the job-index-failure-count annotation,
status.failedIndexes, maxFailedIndexes (MaxFailedIndexesExceeded, FailedIndexes);
activeDeadlineSeconds (DeadlineExceeded); FailureTarget / SuccessCriteriaMet first, Failed / Complete
once no pod is left running or terminating; ttlSecondsAfterFinished (the TTL-after-finished
controller deletes the Job, its pods follow through the garbage collector). Deleted Jobs' pods lose
their tracking finalizer. Pods are admitted as API creates are (Priority: a missing PriorityClass is
refused naming the generateName prefix; LimitRanger defaults and bounds,
ResourceQuota): a refused pod is a FailedCreate Warning event (`Error creating: pods "x" is forbidden:
exceeded quota: ...`) and the Job is tried again a little later. Not simulated: successPolicy, the pod-recreation backoff delay of Never pods.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
from datetime import UTC, datetime

from kubesim import admission
from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.jobfailure import (
    format_indexes,
    match_pod_failure_policy,
    parse_indexes,
    restarts_past_backoff_limit,
)
from kubesim.controllers.pods import (
    condition,
    condition_true,
    controller_owner,
    is_terminal,
    key_of,
    node_name,
    phase,
    qos_class,
    set_condition,
)
from kubesim.store import AlreadyExistsError, NotFoundError, Obj, ObjectStore, WatchEvent, clone, rfc3339

JOBS = "jobs.batch"
_ADMISSION_RETRY_S = 2.0  # a pod admission refused (quota, limits) is tried again after this long
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
INDEX_FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_COUNT_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_CONTROLLER = "kubernetes.io/job-controller"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(seed: str) -> str:
    digest = hashlib.blake2b(seed.encode(), digest_size=8).digest()
    return "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])


def _index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _tracked(pod: Obj) -> bool:
    return TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or ())


def _int(text: object) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return 0


def _failure_count(pod: Obj) -> int:
    return _int((pod["metadata"].get("annotations") or {}).get(INDEX_FAILURE_COUNT_KEY))


def _condition_of(obj: Obj, ctype: str) -> Obj | None:
    found = condition(obj, ctype)
    return found if found and found.get("status") == "True" else None


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
        self._timers: list[tuple[float, str, str]] = []  # deadlines and TTL expiries
        self._orphaned: set[str] = set()  # uids of deleted Jobs whose pods keep a tracking finalizer
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
        return bool(self._dirty or self._orphaned)

    @property
    def next_due(self) -> float | None:
        return self._timers[0][0] if self._timers else None

    def _on_job(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            self._dirty.discard(key_of(event.obj))
            uid = event.obj["metadata"].get("uid", "")
            if self._pods_by_job.get(uid):
                self._orphaned.add(uid)
            return
        if self._writing:
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
        while self._timers and self._timers[0][0] <= now:
            _, ns, name = heapq.heappop(self._timers)
            self._dirty.add((ns, name))
        if self._orphaned:
            uids, self._orphaned = self._orphaned, set()
            for uid in sorted(uids):
                self._release_pods(self._job_pods(uid))
        if not self._dirty:
            return
        keys, self._dirty = self._dirty, set()
        for ns, name in sorted(keys):
            job = self._store.find(JOBS, ns, name)
            if job is not None:
                self._reconcile(job, now)

    def _job_pods(self, uid: str) -> list[Obj]:
        return [
            p
            for k in sorted(self._pods_by_job.get(uid, ()))
            if (p := self._store.find("pods", *k)) is not None
            and (controller_owner(p, "Job") or {}).get("uid") == uid
        ]

    # ------------------------------------------------------------------ reconcile

    def _reconcile(self, job: Obj, now: float) -> None:
        spec = job.get("spec") or {}
        if spec.get("managedBy") not in (None, "", JOB_CONTROLLER):
            return
        ns, name = key_of(job)
        pods = self._job_pods(job["metadata"].get("uid", ""))
        # the status is what a reconcile edits: the rest of the Job is read only, and shared
        work = {**job, "status": clone(job.get("status") or {})}
        status = work["status"]
        if job["metadata"].get("deletionTimestamp"):
            self._release_pods(pods)
            return
        if is_finished(job):
            self._delete_pods(
                [p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
            )
            self._count_and_release(work, pods, _condition_of(work, "FailureTarget"), now)
            self._write_status(job, work)
            self._schedule_ttl(work, now)
            return
        tmpl_spec = (spec.get("template") or {}).get("spec") or {}
        policy = spec.get("podFailurePolicy")
        parallelism = int(spec.get("parallelism", 1))
        raw_completions = spec.get("completions")
        completions: int | None = None if raw_completions is None else int(raw_completions)
        if completions is None and "parallelism" not in spec:
            completions = 1
        indexed = spec.get("completionMode") == "Indexed" and completions is not None
        backoff_limit = int(spec.get("backoffLimit", 6))
        per_index = spec.get("backoffLimitPerIndex")
        ts = rfc3339(now)

        active = [p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in pods if not is_terminal(p) and p["metadata"].get("deletionTimestamp")]
        finishing = _condition_of(work, "FailureTarget") or _condition_of(work, "SuccessCriteriaMet")

        # failures first: the counters as they will be once every finished pod is counted
        new_failed = [
            p for p in pods if _tracked(p) and self._considered_failed(p, policy) and phase(p) != "Succeeded"
        ]
        counted_new = [p for p in new_failed if match_pod_failure_policy(policy, p).counts]
        failed_total = int(status.get("failed") or 0) + len(counted_new)
        if indexed and per_index is not None:
            failed_idx = parse_indexes(status.get("failedIndexes")) | self._failed_indexes(
                pods, policy, int(per_index), completions or 0
            )
        else:
            failed_idx = set()
        succeeded_idx = parse_indexes(status.get("completedIndexes")) | {
            i
            for p in pods
            if phase(p) == "Succeeded" and (i := _index(p)) is not None and i < (completions or 0)
        }
        deadline = spec.get("activeDeadlineSeconds")
        if finishing is None and not spec.get("suspend"):
            started = _epoch(status.get("startTime") or ts, now)
            fail_job = next(
                (
                    v.message
                    for p in pods
                    if phase(p) == "Failed"
                    and (v := match_pod_failure_policy(policy, p)).action == "FailJob"
                    and v.message
                ),
                None,
            )
            if fail_job is not None:
                finishing = self._target(work, now, "FailureTarget", "PodFailurePolicy", fail_job)
            elif failed_total > backoff_limit or restarts_past_backoff_limit(
                tmpl_spec.get("restartPolicy"), pods, backoff_limit
            ):
                finishing = self._target(
                    work,
                    now,
                    "FailureTarget",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                )
            elif deadline is not None and status.get("startTime") and now >= started + float(deadline):
                finishing = self._target(
                    work,
                    now,
                    "FailureTarget",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                )
            elif indexed and per_index is not None:
                max_failed = spec.get("maxFailedIndexes")
                if max_failed is not None and len(failed_idx) > int(max_failed):
                    finishing = self._target(
                        work,
                        now,
                        "FailureTarget",
                        "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes",
                    )
                elif failed_idx and len(failed_idx | succeeded_idx) >= (completions or 0):
                    finishing = self._target(
                        work, now, "FailureTarget", "FailedIndexes", "Job has failed indexes"
                    )

        if finishing is not None:
            if finishing.get("type") == "FailureTarget":
                self._delete_pods(active)
                terminating += active
                active = []
        elif spec.get("suspend"):
            # deleteJobPods: the tracking finalizer goes first, so pods stopped by a suspend never count
            self._release_pods(active)
            self._delete_pods(active)
            terminating += active
            active = []
            if set_condition(work, "Suspended", "True", now, "JobSuspended", "Job suspended"):
                self._events.record(job, "Suspended", "Job suspended", "Normal", "job-controller")
        else:
            if condition_true(job, "Suspended"):
                set_condition(work, "Suspended", "False", now, "JobResumed", "Job resumed")
                self._events.record(job, "Resumed", "Job resumed", "Normal", "job-controller")
                status["startTime"] = ts
            if not status.get("startTime"):
                status["startTime"] = ts
            if deadline is not None:
                due = _epoch(status["startTime"], now) + float(deadline)
                if due > now:
                    heapq.heappush(self._timers, (due, ns, name))
            wait_terminating = spec.get("podReplacementPolicy") == "Failed" or policy is not None
            succeeded_now = (
                len(succeeded_idx)
                if indexed
                else int(status.get("succeeded") or 0)
                + sum(1 for p in pods if _tracked(p) and phase(p) == "Succeeded")
            )
            if completions is None:
                done = succeeded_now > 0 and not active
            else:
                done = succeeded_now >= completions and not active
            if done:
                finishing = self._target(
                    work,
                    now,
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            elif indexed and completions is not None:
                busy = {i for p in active if (i := _index(p)) is not None}
                if wait_terminating:
                    busy |= {i for p in terminating if (i := _index(p)) is not None}
                want = [
                    i
                    for i in range(completions)
                    if i not in succeeded_idx and i not in busy and i not in failed_idx
                ]
                counts = self._index_failure_counts(pods, policy) if per_index is not None else {}
                for i in want[: max(0, parallelism - len(active))]:
                    if (made := self._create_pod(job, i, counts.get(i))) is not None:
                        active.append(made)
            else:
                if completions is None:
                    missing = 0 if succeeded_now else parallelism - len(active)
                else:
                    missing = min(parallelism, completions - succeeded_now) - len(active)
                if wait_terminating:
                    missing -= len(terminating)
                for _ in range(max(0, missing)):
                    if (made := self._create_pod(job, None, None)) is not None:
                        active.append(made)

        self._count_and_release(work, pods, finishing, now)
        if indexed:
            status["completedIndexes"] = format_indexes(
                parse_indexes(status.get("completedIndexes")) | succeeded_idx
            )
            status["succeeded"] = len(parse_indexes(status["completedIndexes"]))
            if per_index is not None:
                status["failedIndexes"] = format_indexes(failed_idx)
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if condition_true(p, "Ready"))
        status["terminating"] = len(terminating)
        if finishing is not None and not active and not terminating:
            self._finish(job, work, finishing, now)
        for field in ("active", "succeeded", "failed"):
            if not status.get(field):
                status.pop(field, None)  # omitempty, as the API server serialises them
        self._write_status(job, work)
        self._schedule_ttl(work, now)

    # ------------------------------------------------------------------ counting (job tracking)

    def _considered_failed(self, pod: Obj, policy: Obj | None) -> bool:
        """isPodFailed: Failed, or (without a podFailurePolicy) being deleted and not Succeeded."""
        if phase(pod) == "Failed":
            return True
        if policy is not None:
            return False
        return bool(pod["metadata"].get("deletionTimestamp")) and phase(pod) != "Succeeded"

    def _count_and_release(self, work: Obj, pods: list[Obj], finishing: Obj | None, now: float) -> None:
        """Finished pods that still hold the tracking finalizer: into uncountedTerminatedPods (written),
        finalizer removed, then into the counters. Once a failure target is set every pod still running
        counts as failed when it goes."""
        status = work.setdefault("status", {})
        policy = (work.get("spec") or {}).get("podFailurePolicy")
        failing = finishing is not None and finishing.get("type") == "FailureTarget"
        uncounted = status.get("uncountedTerminatedPods") or {}
        ok_uids: list[str] = list(uncounted.get("succeeded") or [])
        bad_uids: list[str] = list(uncounted.get("failed") or [])
        release: list[Obj] = []
        for pod in pods:
            if not _tracked(pod):
                continue
            uid = pod["metadata"].get("uid", "")
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            gone = is_terminal(pod) or (deleting and (failing or self._considered_failed(pod, policy)))
            if not gone:
                continue
            release.append(pod)
            if phase(pod) == "Succeeded":
                if uid not in ok_uids and uid not in bad_uids:
                    ok_uids.append(uid)
            elif match_pod_failure_policy(policy, pod).counts and uid not in bad_uids and uid not in ok_uids:
                bad_uids.append(uid)
        if not release and not ok_uids and not bad_uids:
            return
        status["uncountedTerminatedPods"] = {
            k: v for k, v in (("succeeded", ok_uids), ("failed", bad_uids)) if v
        }
        self._write_status(None, work)
        self._release_pods(release)
        indexed = (work.get("spec") or {}).get("completionMode") == "Indexed"
        if not indexed:
            status["succeeded"] = int(status.get("succeeded") or 0) + len(ok_uids)
        status["failed"] = int(status.get("failed") or 0) + len(bad_uids)
        status["uncountedTerminatedPods"] = {}

    def _failed_indexes(self, pods: list[Obj], policy: Obj | None, limit: int, completions: int) -> set[int]:
        out = set()
        for pod in pods:
            i = _index(pod)
            if i is None or i >= completions or phase(pod) != "Failed":
                continue
            verdict = match_pod_failure_policy(policy, pod)
            if verdict.action == "FailIndex" or (verdict.counts and _failure_count(pod) + 1 > limit):
                out.add(i)
        return out

    def _index_failure_counts(self, pods: list[Obj], policy: Obj | None) -> dict[int, tuple[int, int]]:
        """Per index, the (failure, ignored failure) counts a replacement pod carries."""
        out: dict[int, tuple[int, int]] = {}
        for pod in pods:
            i = _index(pod)
            if i is None or not self._considered_failed(pod, policy):
                continue
            ann = pod["metadata"].get("annotations") or {}
            fails = _failure_count(pod)
            ignored = _int(ann.get(INDEX_IGNORED_COUNT_KEY))
            if match_pod_failure_policy(policy, pod).counts:
                fails += 1
            else:
                ignored += 1
            prev = out.get(i, (0, 0))
            out[i] = (max(prev[0], fails), max(prev[1], ignored))
        return out

    def _release_pods(self, pods: list[Obj]) -> None:
        for pod in pods:
            if not _tracked(pod):
                continue

            def drop(o: Obj) -> None:
                left = [f for f in o["metadata"].get("finalizers") or () if f != TRACKING_FINALIZER]
                if left:
                    o["metadata"]["finalizers"] = left
                else:
                    o["metadata"].pop("finalizers", None)

            with contextlib.suppress(NotFoundError):
                self._store.mutate("pods", *key_of(pod), drop)

    # ------------------------------------------------------------------ conditions and writes

    def _target(self, work: Obj, now: float, ctype: str, reason: str, message: str) -> Obj:
        set_condition(work, ctype, "True", now, reason, message)
        found = _condition_of(work, ctype)
        assert found is not None
        return found

    def _finish(self, job: Obj, work: Obj, target: Obj, now: float) -> None:
        status = work.setdefault("status", {})
        reason, message = str(target.get("reason", "")), str(target.get("message", ""))
        if target.get("type") == "SuccessCriteriaMet":
            set_condition(work, "Complete", "True", now, reason, message)
            status["completionTime"] = rfc3339(now)
            self._events.record(job, "Completed", "Job completed", "Normal", "job-controller")
        else:
            set_condition(work, "Failed", "True", now, reason, message)
            self._events.record(job, reason, message, "Warning", "job-controller")

    def _schedule_ttl(self, work: Obj, now: float) -> None:
        ttl = (work.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None or not is_finished(work):
            return
        cond = _condition_of(work, "Complete") or _condition_of(work, "Failed") or {}
        finished = _epoch(str(cond.get("lastTransitionTime") or ""), now)
        ns, name = key_of(work)
        if now >= finished + float(ttl):
            with contextlib.suppress(NotFoundError):
                self._store.request_delete(JOBS, ns, name)
        else:
            heapq.heappush(self._timers, (finished + float(ttl), ns, name))

    def _write_status(self, job: Obj | None, work: Obj) -> None:
        ns, name = key_of(work)
        current = self._store.find(JOBS, ns, name)
        if current is None or (current.get("status") or {}) == work.get("status"):
            return
        self._writing = True
        try:
            self._store.set_field(JOBS, ns, name, "status", clone(work.get("status")))
        except NotFoundError:
            pass
        finally:
            self._writing = False

    def _delete_pods(self, pods: list[Obj]) -> None:
        """DELETE with the pod's terminationGracePeriodSeconds: the kubelet stops it, the finalizer holds it."""
        for pod in pods:
            grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            if not node_name(pod) or phase(pod) == "Pending":
                grace = 0
            with contextlib.suppress(NotFoundError):
                self._store.request_delete("pods", *key_of(pod), grace)

    def _create_pod(self, job: Obj, index: int | None, failures: tuple[int, int] | None) -> Obj | None:
        """The pod for one slot of the Job, created through LimitRanger and ResourceQuota admission;
        None (a FailedCreate event, a retry later) when admission refuses it."""
        ns, job_name = key_of(job)
        uid = job["metadata"].get("uid", "")
        template = (job.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        spec = clone(template.get("spec") or {})
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
            if (job.get("spec") or {}).get("backoffLimitPerIndex") is not None:
                annotations[INDEX_FAILURE_COUNT_KEY] = str((failures or (0, 0))[0])
                if failures and failures[1]:
                    annotations[INDEX_IGNORED_COUNT_KEY] = str(failures[1])
            for c in spec.get("containers") or ():
                c["env"] = [*(c.get("env") or []), {"name": "JOB_COMPLETION_INDEX", "value": str(index)}]
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Never")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": prefix,
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "finalizers": [TRACKING_FINALIZER],
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
        try:  # the Priority plugin mutates before the server names the pod: its refusal names the prefix
            admission.admit_priority(self._store, pod)
        except admission.AdmissionError as e:
            self._events.record(
                job,
                "FailedCreate",
                f'Error creating: pods "{prefix}" is forbidden: {e}',
                "Warning",
                "job-controller",
            )
            heapq.heappush(self._timers, (self._clock.now() + _ADMISSION_RETRY_S, ns, job_name))
            return None
        try:  # the pod goes through the API server's admission, as the real controller's create does
            admission.admit_limit_ranges(self._store, pod)
            admission.admit_quota(self._store, "pods", pod)
        except admission.AdmissionError as e:
            self._serial += 1
            name = prefix + _suffix(f"{uid}/{self._serial}")
            self._events.record(
                job,
                "FailedCreate",
                f'Error creating: pods "{name}" is forbidden: {e}',
                "Warning",
                "job-controller",
            )
            # tried again later (the real controller backs off; quota may free up meanwhile)
            heapq.heappush(self._timers, (self._clock.now() + _ADMISSION_RETRY_S, ns, job_name))
            return None
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
