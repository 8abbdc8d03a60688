"""The simulated Kueue: queued Jobs, JobSets and RayJobs become Workloads admitted against ClusterQueue quota.

Owns `KueueController`. A Job, JobSet or RayJob labelled `kueue.x-k8s.io/queue-name` is held suspended
(the webhook's job) and gets a Workload (v1beta2 shape; owner = the object; label kueue.x-k8s.io/job-uid;
named `<kind>-<name>-<hash>`; its pod sets as Kueue's integrations build them, kueue_kinds.py: a Job's
one `main` of min(parallelism, completions) pods, a JobSet's one per replicated Job, a RayJob's head and
worker groups). A Workload's resources are summed over its pod sets and each resource gets one flavor;
the admission has one podSetAssignment per pod set with its own usage, and every pod set's template gets
the flavor's node labels and tolerations. Pending Workloads of a ClusterQueue are admitted in order (priority, then
creation): the first flavor of the covering resource group whose nominal quota (plus borrowing from the
cohort, up to borrowingLimit and the lenders' lendingLimit) fits the pod set gets it. StrictFIFO stops at a
head that does not fit; BestEffortFIFO tries the next. On admission the Workload gets status.admission
and QuotaReserved/Admitted conditions, and the Job is unsuspended with the flavor's nodeLabels added to
the pod template's nodeSelector and its tolerations appended. ClusterQueue status (flavorsReservation,
flavorsUsage, pending/reserving/admittedWorkloads) and LocalQueue status follow; quota is freed when the
Job finishes (Workload condition Finished) or the Workload is deleted.

Preemption (kueue_preemption.py chooses the targets): a Workload that does not fit evicts admitted
Workloads as its ClusterQueue's spec.preemption allows (withinClusterQueue, reclaimWithinCohort). A target
gets Evicted=True (reason Preempted) and Preempted=True (reason InClusterQueue / InCohortReclamation) with
Kueue's message, events EvictedDueToPreempted and Preempted (PreemptedWorkload on the preemptor); its Job
is suspended again with the pod template's original node selector and tolerations; once the Job has no
active pods the quota is released (QuotaReserved False reason Pending, Admitted False NoReservation) and
the Workload queues again. The preemptor waits with "... Pending the preemption of N workload(s)". On a
later admission Evicted/Preempted turn False (reason QuotaReserved, "Previously: ..."). No admission
checks.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.jobs import JOBS
from kubesim.controllers.kueue_kinds import QUEUED, Queued, owner_of
from kubesim.controllers.kueue_preemption import (
    Target,
    cq_path,
    find_targets,
    preemption_message,
)
from kubesim.controllers.pods import (
    Requests,
    condition,
    condition_true,
    effective_requests,
    key_of,
    replace_field,
    set_condition,
)
from kubesim.quantity import format_quantity, parse_quantity
from kubesim.store import NotFoundError, Obj, ObjectStore, WatchEvent

WORKLOADS = "workloads.kueue.x-k8s.io"
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
FLAVORS = "resourceflavors.kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
API_VERSION = "kueue.x-k8s.io/v1beta2"
_EPS = 1e-9

Usage = dict[str, dict[str, float]]  # flavor -> resource -> amount


def workload_name(job_name: str, job_uid: str, prefix: str = "job") -> str:
    digest = hashlib.sha256(f"{job_name}/{job_uid}".encode()).hexdigest()[:5]
    return f"{prefix}-{job_name}"[:57] + f"-{digest}"


def _prio(wl: Obj) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def _queue(job: Obj) -> str | None:
    return (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)


class KueueController:
    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store = store
        self._clock = clock
        self._events = events
        self._writing = False
        self._evicted_now = False
        self.dirty = True
        for key in (*QUEUED, WORKLOADS, CLUSTER_QUEUES, LOCAL_QUEUES, FLAVORS):
            store.subscribe(key, self._on_write)

    def _on_write(self, event: WatchEvent) -> None:
        if self._writing:
            return
        if event.key in QUEUED and _queue(event.obj) is None:
            return
        self.dirty = True

    def _queued_objects(self) -> list[tuple[Queued, Obj]]:
        """Every object of an integrated kind that names a LocalQueue, Jobs first."""
        return [
            (q, obj)
            for key, q in QUEUED.items()
            for obj in self._store.list(key)[0]
            if _queue(obj) is not None and not q.managed_elsewhere(obj)
        ]

    def _owner(self, wl: Obj) -> tuple[Queued, Obj | None]:
        """The Workload's queued object (None when gone) and its kind's adapter."""
        found = owner_of(wl)
        if found is None:
            return QUEUED[JOBS], None
        q, ref = found
        return q, self._store.find(q.key, wl["metadata"].get("namespace", ""), ref["name"])

    # ------------------------------------------------------------------ the pass

    def tick(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        cqs = {cq["metadata"]["name"]: cq for cq in self._store.list(CLUSTER_QUEUES)[0]}
        if not cqs and not self._queued_objects():
            return
        self._writing = True
        self._evicted_now = False
        try:
            self._pass(cqs)
        finally:
            self._writing = False
        if self._evicted_now:
            self.dirty = True  # the evicted Workloads' Jobs are stopped on the next pass

    def _pass(self, cqs: dict[str, Obj]) -> None:
        now = self._clock.now()
        lqs = {key_of(lq): lq for lq in self._store.list(LOCAL_QUEUES)[0]}
        flavors = {f["metadata"]["name"]: f for f in self._store.list(FLAVORS)[0]}
        workloads = {
            w["metadata"].get("labels", {}).get(JOB_UID_LABEL, ""): w for w in self._store.list(WORKLOADS)[0]
        }
        for q, job in self._queued_objects():
            if q.finished(job)[0]:
                continue
            uid = job["metadata"].get("uid", "")
            if uid not in workloads:
                if not (job.get("spec") or {}).get("suspend") and not q.started(job):
                    self._store.mutate(q.key, *key_of(job), lambda o: o["spec"].__setitem__("suspend", True))
                workloads[uid] = self._create_workload(q, job)
        # finished jobs free their quota
        for uid, wl in list(workloads.items()):
            q, owner_job = self._owner(wl)
            done, ok = q.finished(owner_job) if owner_job is not None else (False, False)
            if done and not condition_true(wl, "Finished"):
                workloads[uid] = self._set_wl(
                    wl,
                    lambda o, ok=ok: set_condition(
                        o,
                        "Finished",
                        "True",
                        now,
                        "Succeeded" if ok else "Failed",
                        "Job finished successfully" if ok else "Job failed",
                    ),
                )
        for uid, wl in list(workloads.items()):
            if condition_true(wl, "Evicted") and (wl.get("status") or {}).get("admission"):
                workloads[uid] = self._stop_evicted(wl, now)
        usage: dict[str, Usage] = {name: {} for name in cqs}
        queued: dict[str, list[Obj]] = {name: [] for name in cqs}
        for wl in workloads.values():
            if condition_true(wl, "Finished"):
                continue
            admission = (wl.get("status") or {}).get("admission")
            if admission:
                cq_usage = usage.setdefault(admission.get("clusterQueue", ""), {})
                for psa in admission.get("podSetAssignments") or ():
                    for res, flavor in (psa.get("flavors") or {}).items():
                        amount = parse_quantity((psa.get("resourceUsage") or {}).get(res, "0"))
                        per = cq_usage.setdefault(flavor, {})
                        per[res] = per.get(res, 0.0) + amount
                continue
            lq = lqs.get((wl["metadata"].get("namespace", ""), (wl.get("spec") or {}).get("queueName", "")))
            if lq is None:
                self._pending(
                    wl,
                    now,
                    "Inadmissible",
                    f"LocalQueue {(wl.get('spec') or {}).get('queueName')} doesn't exist",
                )
                continue
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            if cq_name not in cqs:
                self._pending(wl, now, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
                continue
            queued[cq_name].append(wl)
        orders = {
            name: sorted(
                queued[name],
                key=lambda w: (
                    -int((w.get("spec") or {}).get("priority") or 0),
                    w["metadata"].get("creationTimestamp", ""),
                    w["metadata"]["name"],
                ),
            )
            for name in cqs
        }
        # As Kueue's scheduler orders the heads of a cohort, Workloads that fit without borrowing go first.
        admitted_now: set[str] = set()
        for name in sorted(cqs):
            cq = cqs[name]
            strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            for wl in orders[name]:
                assignment, need, _ = self._assign(cq, cqs, usage, wl, flavors, borrow=False)
                if assignment is None:
                    if strict:
                        break
                    continue
                self._admit(wl, cq, assignment, need, flavors, usage, now)
                admitted_now.add(wl["metadata"]["name"])
        for name in sorted(cqs):
            cq = cqs[name]
            strict = (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO"
            blocked = False
            for wl in orders[name]:
                if wl["metadata"]["name"] in admitted_now:
                    continue
                if blocked:
                    self._pending(
                        wl, now, "Pending", "Workload is waiting behind the head of a StrictFIFO ClusterQueue"
                    )
                    continue
                assignment, need, why = self._assign(cq, cqs, usage, wl, flavors)
                if assignment is None:
                    targets = self._preemption_targets(wl, cq, cqs, usage, workloads, need, why)
                    if targets:
                        self._preempt(wl, cq, cqs, targets, now)
                        why = f"{why}. Pending the preemption of {len(targets)} workload(s)"
                    self._pending(wl, now, "Pending", why)
                    blocked = strict
                    continue
                self._admit(wl, cq, assignment, need, flavors, usage, now)
        self._write_queue_status(cqs, lqs, workloads, usage)

    # ------------------------------------------------------------------ preemption

    def _preemption_targets(
        self,
        wl: Obj,
        cq: Obj,
        cqs: dict[str, Obj],
        usage: dict[str, Usage],
        workloads: dict[str, Obj],
        need: Requests,
        why: str,
    ) -> list[Target]:
        if "insufficient unused quota" not in why or not (cq.get("spec") or {}).get("preemption"):
            return []
        admitted = [
            (w, str((w.get("status") or {}).get("admission", {}).get("clusterQueue", "")))
            for w in workloads.values()
            if (w.get("status") or {}).get("admission") and not condition_true(w, "Finished")
        ]
        order: list[tuple[str, list[str]]] = []
        for group in (cq.get("spec") or {}).get("resourceGroups") or ():
            covered = [r for r in group.get("coveredResources") or () if r in need]
            if covered:
                order.extend((fq.get("name", ""), covered) for fq in group.get("flavors") or ())
                break
        found = find_targets(
            wl, cq, cqs, usage, admitted, need, order, lambda u, f, r: self._available(cq, cqs, u, f, r)
        )
        return found or []

    def _preempt(self, wl: Obj, cq: Obj, cqs: dict[str, Obj], targets: list[Target], now: float) -> None:
        for target in targets:
            victim = target.workload
            if condition_true(victim, "Evicted"):
                continue  # an eviction already under way
            message = preemption_message(
                wl,
                target.reason,
                cq_path(cq),
                cq_path(cqs.get(target.cluster_queue, {"metadata": {"name": target.cluster_queue}})),
            )

            def evict(o: Obj, message: str = message, reason: str = target.reason) -> None:
                set_condition(o, "Evicted", "True", now, "Preempted", message)
                set_condition(o, "Preempted", "True", now, reason, message)

            evicted = self._set_wl(victim, evict)
            self._evicted_now = True
            self._events.record(evicted, "EvictedDueToPreempted", message, "Normal", "kueue-admission")
            self._events.record(
                evicted,
                "Preempted",
                f"{message}; preemptor effective priority: {_prio(wl)} (base: {_prio(wl)}, boost: 0); "
                f"preemptee effective priority: {_prio(victim)} (base: {_prio(victim)}, boost: 0)",
                "Normal",
                "kueue-admission",
            )
            self._events.record(
                wl,
                "PreemptedWorkload",
                f"Preempted workload {victim['metadata'].get('namespace', '')}/{victim['metadata']['name']} "
                f"(UID: {victim['metadata'].get('uid', '')}) in ClusterQueue {target.cluster_queue}; preemptor "
                f"effective priority: {_prio(wl)} (base: {_prio(wl)}, boost: 0); preemptee effective priority: "
                f"{_prio(victim)} (base: {_prio(victim)}, boost: 0)",
                "Normal",
                "kueue-admission",
            )

    def _stop_evicted(self, wl: Obj, now: float) -> Obj:
        """An evicted Workload's Job is suspended again; once it has no active pods the quota is released."""
        q, job = self._owner(wl)
        if job is not None and not (job.get("spec") or {}).get("suspend"):
            originals = [
                (ps.get("template") or {}).get("spec") or {}
                for ps in (wl.get("spec") or {}).get("podSets") or ()
            ]

            def stop(o: Obj) -> None:
                o["spec"]["suspend"] = True
                for (_n, _c, template), original in zip(q.templates(o), originals, strict=False):
                    pod_spec = template.setdefault("spec", {})
                    for field in ("nodeSelector", "tolerations"):
                        if original.get(field):
                            pod_spec[field] = copy.deepcopy(original[field])
                        else:
                            pod_spec.pop(field, None)

            job = self._store.mutate(q.key, *key_of(job), stop)
            self._events.record(
                job,
                "Stopped",
                str((condition(wl, "Evicted") or {}).get("message", "")),
                "Normal",
                "kueue-controller",
            )
            return wl
        if job is not None and q.active(job):
            return wl
        message = str((condition(wl, "Evicted") or {}).get("message", ""))

        def release(o: Obj) -> None:
            o.setdefault("status", {}).pop("admission", None)
            set_condition(o, "QuotaReserved", "False", now, "Pending", message)
            set_condition(o, "Admitted", "False", now, "NoReservation", "The workload has no reservation")

        return self._set_wl(wl, release)

    # ------------------------------------------------------------------ workloads

    def _create_workload(self, q: Queued, job: Obj) -> Obj:
        ns, name = key_of(job)
        uid = job["metadata"].get("uid", "")
        pod_sets = copy.deepcopy(q.pod_sets(copy.deepcopy(job)))
        priority = 0
        # Kueue takes the priority class of the first pod set that names one
        pc_name = next(
            (
                ps["template"].get("spec", {}).get("priorityClassName")
                for ps in pod_sets
                if (ps["template"].get("spec") or {}).get("priorityClassName")
            ),
            None,
        )
        wl_spec: dict[str, Any] = {
            "queueName": _queue(job),
            "podSets": pod_sets,
            "active": True,
        }
        if pc_name:
            pc = self._store.find("priorityclasses.scheduling.k8s.io", "", pc_name)
            priority = int(pc.get("value") or 0) if pc else 0
            wl_spec["priorityClassRef"] = {
                "group": "scheduling.k8s.io",
                "kind": "PriorityClass",
                "name": pc_name,
            }
        wl_spec["priority"] = priority
        wl: Obj = {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": workload_name(name, uid, q.prefix),
                "namespace": ns,
                "labels": {JOB_UID_LABEL: uid},
                "ownerReferences": [
                    {
                        "apiVersion": q.api_version,
                        "kind": q.kind,
                        "name": name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": wl_spec,
            "status": {"conditions": []},
        }
        if job["metadata"].get("creationTimestamp"):
            # Kueue's job reconciler creates it the moment the Job appears: queue order follows the Job
            wl["metadata"]["creationTimestamp"] = job["metadata"]["creationTimestamp"]
        created = self._store.create(WORKLOADS, wl)
        self._events.record(
            job,
            "CreatedWorkload",
            f"Created Workload: {ns}/{created['metadata']['name']}",
            "Normal",
            "kueue-controller",
        )
        return created

    def _set_wl(self, wl: Obj, fn: Any) -> Obj:
        try:
            return self._store.mutate(WORKLOADS, *key_of(wl), fn)
        except NotFoundError:
            return wl

    def _pending(self, wl: Obj, now: float, reason: str, message: str) -> None:
        current = condition(wl, "QuotaReserved")
        if current and current.get("reason") == reason and current.get("message") == message:
            return
        self._set_wl(wl, lambda o: set_condition(o, "QuotaReserved", "False", now, reason, message))

    def _assign(
        self,
        cq: Obj,
        cqs: dict[str, Obj],
        usage: dict[str, Usage],
        wl: Obj,
        flavors: dict[str, Obj],
        borrow: bool = True,
    ) -> tuple[dict[str, str] | None, Requests, str]:
        need: Requests = {}
        selectors = []
        pod_sets = (wl.get("spec") or {}).get("podSets") or [{}]
        for pod_set in pod_sets:
            template = pod_set.get("template") or {}
            for r, v in self._pod_set_need(pod_set).items():
                need[r] = need.get(r, 0.0) + v
            selectors.append((template.get("spec") or {}).get("nodeSelector") or {})
        set_name = str(pod_sets[0].get("name") or "main")
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        assignment: dict[str, str] = {}
        for res in sorted(need):
            if not any(res in (g.get("coveredResources") or ()) for g in groups):
                return (
                    None,
                    need,
                    f"couldn't assign flavors to pod set {set_name}: resource {res} unavailable in ClusterQueue",
                )
        for group in groups:
            covered = [r for r in group.get("coveredResources") or () if r in need]
            if not covered:
                continue
            reasons = []
            for fq in group.get("flavors") or ():
                flavor = flavors.get(fq.get("name", ""))
                if flavor is None:
                    reasons.append(f"flavor {fq.get('name')} not found")
                    continue
                labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
                if any(k in sel and sel[k] != v for sel in selectors for k, v in labels.items()):
                    reasons.append(f"flavor {fq['name']} doesn't match node affinity")
                    continue
                short = [
                    r
                    for r in covered
                    if need[r] > self._available(cq, cqs, usage, fq["name"], r, borrow) + _EPS
                ]
                if short:
                    r = short[0]
                    more = need[r] - self._available(cq, cqs, usage, fq["name"], r, borrow)
                    reasons.append(
                        f"insufficient unused quota for {r} in flavor {fq['name']}, "
                        f"{format_quantity(more, r)} more needed"
                    )
                    continue
                for r in covered:
                    assignment[r] = fq["name"]
                break
            else:
                return None, need, f"couldn't assign flavors to pod set {set_name}: " + "; ".join(reasons)
        return assignment, need, ""

    @staticmethod
    def _pod_set_need(pod_set: Obj) -> Requests:
        count = int(pod_set.get("count") or 1)
        per_pod = effective_requests({"spec": (pod_set.get("template") or {}).get("spec") or {}})
        return {r: v * count for r, v in per_pod.items()}

    def _quota(self, cq: Obj, flavor: str, res: str) -> tuple[float, float | None, float | None]:
        for group in (cq.get("spec") or {}).get("resourceGroups") or ():
            for fq in group.get("flavors") or ():
                if fq.get("name") != flavor:
                    continue
                for r in fq.get("resources") or ():
                    if r.get("name") == res:
                        borrow = r.get("borrowingLimit")
                        lend = r.get("lendingLimit")
                        return (
                            parse_quantity(r.get("nominalQuota", "0")),
                            None if borrow is None else parse_quantity(borrow),
                            None if lend is None else parse_quantity(lend),
                        )
        return 0.0, None, None

    def _available(
        self,
        cq: Obj,
        cqs: dict[str, Obj],
        usage: dict[str, Usage],
        flavor: str,
        res: str,
        borrow: bool = True,
    ) -> float:
        """Quota of `res` in `flavor` the ClusterQueue can still use: its nominal quota left plus what it may
        borrow from its cohort (borrowingLimit, the lenders' lendingLimit), never more than the cohort has
        left; with borrow=False only its own nominal quota."""
        name = cq["metadata"]["name"]
        nominal, borrow_limit, _ = self._quota(cq, flavor, res)
        used = usage.get(name, {}).get(flavor, {}).get(res, 0.0)
        own = nominal - used
        cohort = (cq.get("spec") or {}).get("cohortName") or (cq.get("spec") or {}).get("cohort")
        if not cohort:
            return own
        lendable = 0.0
        cohort_free = own  # what the whole cohort has left: quota one member borrowed is gone for all
        for other_name, other in cqs.items():
            ospec = other.get("spec") or {}
            if other_name == name or (ospec.get("cohortName") or ospec.get("cohort")) != cohort:
                continue
            o_nominal, _, o_lend = self._quota(other, flavor, res)
            o_used = usage.get(other_name, {}).get(flavor, {}).get(res, 0.0)
            spare = max(0.0, o_nominal - o_used)
            lendable += spare if o_lend is None else min(spare, o_lend)
            cohort_free += o_nominal - o_used
        borrowed = (lendable if borrow_limit is None else min(lendable, borrow_limit)) if borrow else 0.0
        return min(own + borrowed, cohort_free)

    def _admit(
        self,
        wl: Obj,
        cq: Obj,
        assignment: dict[str, str],
        need: Requests,
        flavors: dict[str, Obj],
        usage: dict[str, Usage],
        now: float,
    ) -> None:
        cq_name = cq["metadata"]["name"]
        cq_usage = usage.setdefault(cq_name, {})
        for res, flavor in assignment.items():
            per = cq_usage.setdefault(flavor, {})
            per[res] = per.get(res, 0.0) + need[res]
        assignments = []
        for pod_set in (wl.get("spec") or {}).get("podSets") or [{}]:
            set_need = self._pod_set_need(pod_set)
            mine = {r: f for r, f in assignment.items() if r in set_need}
            assignments.append(
                {
                    "name": str(pod_set.get("name") or "main"),
                    "count": int(pod_set.get("count") or 1),
                    "flavors": dict(sorted(mine.items())),
                    "resourceUsage": {r: format_quantity(set_need[r], r) for r in sorted(mine)},
                }
            )
        admission = {"clusterQueue": cq_name, "podSetAssignments": assignments}

        def admit(obj: Obj) -> None:
            obj.setdefault("status", {})["admission"] = admission
            set_condition(
                obj,
                "QuotaReserved",
                "True",
                now,
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {cq_name}",
            )
            set_condition(obj, "Admitted", "True", now, "Admitted", "The workload is admitted")
            for ctype in ("Evicted", "Preempted"):
                old = condition(obj, ctype)
                if old is not None and old.get("status") == "True":
                    previously = f"Previously: {old.get('message', '')}"
                    set_condition(obj, ctype, "False", now, "QuotaReserved", previously)

        admitted = self._set_wl(wl, admit)
        self._events.record(
            admitted,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}",
            "Normal",
            "kueue-admission",
        )
        found = owner_of(wl)
        if found is None:
            return
        q, owner = found
        ns = wl["metadata"].get("namespace", "")
        used_flavors = [flavors[f] for f in dict.fromkeys(assignment.values()) if f in flavors]

        def start(job: Obj) -> None:
            spec = job.setdefault("spec", {})
            spec["suspend"] = False
            for _name, _count, template in q.templates(job):  # every pod set: one flavor per resource
                pod_spec = template.setdefault("spec", {})
                for flavor in used_flavors:
                    fspec = flavor.get("spec") or {}
                    if fspec.get("nodeLabels"):
                        pod_spec["nodeSelector"] = {
                            **(pod_spec.get("nodeSelector") or {}),
                            **fspec["nodeLabels"],
                        }
                    for tol in fspec.get("tolerations") or ():
                        tolerations = pod_spec.setdefault("tolerations", [])
                        if tol not in tolerations:
                            tolerations.append(dict(tol))

        try:
            job = self._store.mutate(q.key, ns, owner["name"], start)
        except NotFoundError:
            return
        self._events.record(
            job, "Started", f"Admitted by clusterQueue {cq_name}", "Normal", "kueue-controller"
        )

    # ------------------------------------------------------------------ queue status

    def _write_queue_status(
        self,
        cqs: dict[str, Obj],
        lqs: dict[tuple[str, str], Obj],
        workloads: dict[str, Obj],
        usage: dict[str, Usage],
    ) -> None:
        current = {key_of(w): w for w in self._store.list(WORKLOADS)[0]}
        per_cq: dict[str, list[int]] = {n: [0, 0] for n in cqs}  # pending, admitted
        per_lq: dict[tuple[str, str], list[Any]] = {k: [0, 0, {}] for k in lqs}
        for wl in current.values():
            if condition_true(wl, "Finished"):
                continue
            ns = wl["metadata"].get("namespace", "")
            lq_key = (ns, (wl.get("spec") or {}).get("queueName", ""))
            admission = (wl.get("status") or {}).get("admission")
            cq_name = (
                admission.get("clusterQueue")
                if admission
                else (((lqs.get(lq_key) or {}).get("spec") or {}).get("clusterQueue"))
            )
            slot = 1 if admission else 0
            if cq_name in per_cq:
                per_cq[cq_name][slot] += 1
            if lq_key in per_lq:
                per_lq[lq_key][slot] += 1
                if admission:
                    for psa in admission.get("podSetAssignments") or ():
                        for res, flavor in (psa.get("flavors") or {}).items():
                            amount = parse_quantity((psa.get("resourceUsage") or {}).get(res, "0"))
                            per = per_lq[lq_key][2].setdefault(flavor, {})
                            per[res] = per.get(res, 0.0) + amount
        for name, cq in cqs.items():
            flavors_usage = []
            for group in (cq.get("spec") or {}).get("resourceGroups") or ():
                for fq in group.get("flavors") or ():
                    resources = []
                    for r in fq.get("resources") or ():
                        total = usage.get(name, {}).get(fq["name"], {}).get(r["name"], 0.0)
                        nominal = parse_quantity(r.get("nominalQuota", "0"))
                        resources.append(
                            {
                                "name": r["name"],
                                "total": format_quantity(total, r["name"]),
                                "borrowed": format_quantity(max(0.0, total - nominal), r["name"]),
                            }
                        )
                    flavors_usage.append({"name": fq["name"], "resources": resources})
            pending, admitted = per_cq[name]
            status = {
                **(cq.get("status") or {}),
                "flavorsReservation": flavors_usage,
                "flavorsUsage": flavors_usage,
                "pendingWorkloads": pending,
                "reservingWorkloads": admitted,
                "admittedWorkloads": admitted,
            }
            if status != cq.get("status"):
                self._store.mutate(CLUSTER_QUEUES, "", name, replace_field("status", status))
        for key, lq in lqs.items():
            pending, admitted, lq_usage = per_lq[key]
            fu = [
                {
                    "name": f,
                    "resources": [
                        {"name": r, "total": format_quantity(v, r)} for r, v in sorted(res.items())
                    ],
                }
                for f, res in sorted(lq_usage.items())
            ]
            status = {
                **(lq.get("status") or {}),
                "pendingWorkloads": pending,
                "reservingWorkloads": admitted,
                "admittedWorkloads": admitted,
                "flavorsReservation": fu,
                "flavorsUsage": fu,
            }
            if status != lq.get("status"):
                self._store.mutate(LOCAL_QUEUES, *key, replace_field("status", status))
