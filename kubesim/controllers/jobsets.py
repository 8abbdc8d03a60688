"""The JobSet controller (jobset.x-k8s.io/v1alpha2) and Kubeflow Trainer's TrainJob controller.

JobSet: for each spec.replicatedJobs[i], `replicas` child Jobs named <jobset>-<replicatedJob>-<index> from
its Job template, labelled jobset.sigs.k8s.io/{jobset-name, replicatedjob-name, replicatedjob-replicas,
job-index, job-global-index, restart-attempt} (pods too), owned by the JobSet (the Job controller runs
them). status.replicatedJobsStatus counts per replicated Job the child Jobs ready (all pods ready or
done), succeeded, failed, active and suspended. successPolicy (operator All or Any over
targetReplicatedJobs, default all) -> condition Completed (AllJobsCompleted, "jobset completed
successfully"); a failed child Job restarts the whole set (its Jobs deleted, status.restarts + 1) while
restarts < failurePolicy.maxRestarts, else condition Failed (FailedJobs, or ReachedMaxRestarts), and the
remaining Jobs are deleted; terminalState says which. spec.suspend -> Suspended, its Jobs deleted and
counted active until gone. A JobSet whose
spec.managedBy is not jobset.sigs.k8s.io/jobset-controller is left alone (the real controller's rule).

TrainJob: a JobSet of the same name from its runtime (spec.runtimeRef: a ClusterTrainingRuntime, or a
TrainingRuntime in its namespace), its trainer Job ("node") given spec.trainer (numNodes as parallelism,
image, command, args, env, resourcesPerNode on the container named "node", else the first) and
spec.podSpecOverrides (nodeSelector, tolerations) applied to the targeted Jobs, spec.labels/annotations
on the JobSet. Status: jobsStatus from the JobSet, Complete (JobsCompleted) / Failed (JobsFailed) when the
JobSet completes or fails. A missing runtime is a warning event, retried on the next change. managedBy
other than trainer.kubeflow.org/trainjob-controller is left alone. Not simulated: failurePolicy rules,
startupPolicy, coordinator, network/DNS, exclusive placement, initializers.
"""

from __future__ import annotations

import copy
from typing import Any

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.owned import children, create_child, delete_child, reconciled_by
from kubesim.controllers.pods import ANN_DURATION, condition_true, set_condition
from kubesim.store import Obj, ObjectStore, WatchEvent

JOBSETS = "jobsets.jobset.x-k8s.io"
TRAINJOBS = "trainjobs.trainer.kubeflow.org"
JOBS = "jobs.batch"
RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"
NS_RUNTIMES = "trainingruntimes.trainer.kubeflow.org"
JOBSET_CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
L = "jobset.sigs.k8s.io/"


def _finished(obj: Obj, kinds: tuple[str, ...]) -> bool:
    return any(condition_true(obj, k) for k in kinds)


class JobSetController:
    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store, self._clock, self._events = store, clock, events
        self.dirty = True
        for key in (JOBSETS, TRAINJOBS, RUNTIMES):
            store.subscribe(key, self._on_change)
        store.subscribe(JOBS, self._on_job)

    def _on_change(self, event: WatchEvent) -> None:
        self.dirty = True

    def _on_job(self, event: WatchEvent) -> None:
        if L + "jobset-name" in (event.obj["metadata"].get("labels") or {}):
            self.dirty = True

    def tick(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        for tj in self._store.list(TRAINJOBS)[0]:
            self._trainjob(tj)
        for js in self._store.list(JOBSETS)[0]:
            self._jobset(js)

    # ------------------------------------------------------------------ JobSet

    def _child(self, js: Obj, rjob: Obj, index: int, global_index: int, restarts: int) -> Obj:
        name = js["metadata"]["name"]
        template = copy.deepcopy(rjob.get("template") or {})
        labels = {
            L + "jobset-name": name,
            L + "replicatedjob-name": str(rjob["name"]),
            L + "replicatedjob-replicas": str(int(rjob.get("replicas") or 1)),
            L + "job-index": str(index),
            L + "job-global-index": str(global_index),
            L + "restart-attempt": str(restarts),
        }
        meta = template.setdefault("metadata", {})
        meta["name"] = f"{name}-{rjob['name']}-{index}"
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        spec = template.setdefault("spec", {})
        pod_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        parallelism = int(spec.get("parallelism") or 1)
        spec.setdefault("parallelism", parallelism)
        spec.setdefault("completions", parallelism)
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}

    def _jobset(self, js: Obj) -> None:
        spec = js.get("spec") or {}
        if not reconciled_by(spec.get("managedBy"), JOBSET_CONTROLLER) or _finished(
            js, ("Completed", "Failed")
        ):
            return
        now = self._clock.now()
        status = copy.deepcopy(js.get("status") or {})
        work = {"status": status}
        restarts = int(status.get("restarts") or 0)
        owned = children(self._store, JOBS, js)
        current = [
            j
            for j in owned
            if (j["metadata"].get("labels") or {}).get(L + "restart-attempt") == str(restarts)
        ]
        stale = [j for j in owned if j not in current]
        for j in stale:
            if not j["metadata"].get("deletionTimestamp"):
                delete_child(self._store, JOBS, j)
        rjobs = list(spec.get("replicatedJobs") or [])
        if spec.get("suspend"):
            set_condition(work, "Suspended", "True", now, "SuspendedJobs", "jobset is suspended")
            for j in current:
                delete_child(self._store, JOBS, j)
            # the counts follow the Jobs still going away (Kueue releases the quota once none is active)
            status["replicatedJobsStatus"] = [
                {
                    "name": rjob["name"],
                    "ready": 0,
                    "succeeded": 0,
                    "failed": 0,
                    "active": sum(
                        1
                        for j in current
                        if (j["metadata"].get("labels") or {}).get(L + "replicatedjob-name") == rjob["name"]
                        and int((j.get("status") or {}).get("active") or 0) > 0
                    ),
                    "suspended": int(rjob.get("replicas") or 1),
                }
                for rjob in rjobs
            ]
            self._write(js, status)
            return
        if condition_true(work, "Suspended"):
            set_condition(work, "Suspended", "False", now, "ResumeJobs", "jobset is resumed")
        by_name = {j["metadata"]["name"]: j for j in current}
        stale_names = {j["metadata"]["name"] for j in stale}
        global_index = 0
        counts: list[Obj] = []
        any_failed: Obj | None = None
        for rjob in rjobs:
            replicas = int(rjob.get("replicas") or 1)
            row = {"name": rjob["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
            for i in range(replicas):
                child = self._child(js, rjob, i, global_index, restarts)
                global_index += 1
                job = by_name.get(child["metadata"]["name"])
                if job is None:
                    if child["metadata"]["name"] not in stale_names:  # wait for the old attempt to go
                        create_child(self._store, JOBS, js, child)
                    continue
                st = job.get("status") or {}
                parallelism = int((job.get("spec") or {}).get("parallelism") or 1)
                if condition_true(job, "Failed"):
                    row["failed"] += 1
                    any_failed = any_failed or job
                elif condition_true(job, "Complete"):
                    row["succeeded"] += 1
                else:
                    if int(st.get("ready") or 0) + int(st.get("succeeded") or 0) >= parallelism:
                        row["ready"] += 1
                    if int(st.get("active") or 0) > 0:
                        row["active"] += 1
            counts.append(row)
        status["replicatedJobsStatus"] = counts
        if any_failed is not None:
            limit = int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0)
            if restarts < limit:
                status["restarts"] = restarts + 1
                self._events.record(
                    js, "Restarting", f"jobset restarting (attempt {restarts + 1})", "Normal", "jobset"
                )
            else:
                reason, msg = (
                    ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
                    if limit
                    else (
                        "FailedJobs",
                        f"jobset failed due to one or more job failures: {any_failed['metadata']['name']}",
                    )
                )
                set_condition(work, "Failed", "True", now, reason, msg)
                status["terminalState"] = "Failed"
                for j in current:
                    if not condition_true(j, "Failed") and not condition_true(j, "Complete"):
                        delete_child(self._store, JOBS, j)
        elif self._succeeded(spec, counts):
            set_condition(work, "Completed", "True", now, "AllJobsCompleted", "jobset completed successfully")
            status["terminalState"] = "Completed"
            for j in current:
                if not condition_true(j, "Complete"):
                    delete_child(self._store, JOBS, j)
        self._write(js, status)

    @staticmethod
    def _succeeded(spec: Obj, counts: list[Obj]) -> bool:
        policy = spec.get("successPolicy") or {}
        targets = set(policy.get("targetReplicatedJobs") or [r["name"] for r in counts])
        wanted = {r["name"]: int(r.get("replicas") or 1) for r in spec.get("replicatedJobs") or []}
        rows = [r for r in counts if r["name"] in targets]
        if not rows:
            return False
        if policy.get("operator") == "Any":
            return any(r["succeeded"] > 0 for r in rows)
        return all(r["succeeded"] >= wanted.get(r["name"], 1) for r in rows)

    def _write(self, obj: Obj, status: Obj, key: str = JOBSETS) -> None:
        if status == (obj.get("status") or {}):
            return

        def apply(o: Obj) -> None:
            o["status"] = status

        self._store.mutate(key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"], apply)

    # ------------------------------------------------------------------ TrainJob

    def _runtime(self, tj: Obj) -> Obj | None:
        ref = (tj.get("spec") or {}).get("runtimeRef") or {}
        if (ref.get("kind") or "ClusterTrainingRuntime") == "TrainingRuntime":
            return self._store.find(NS_RUNTIMES, tj["metadata"].get("namespace") or "", str(ref.get("name")))
        return self._store.find(RUNTIMES, "", str(ref.get("name")))

    def _trainjob(self, tj: Obj) -> None:
        spec = tj.get("spec") or {}
        if not reconciled_by(spec.get("managedBy"), TRAINJOB_CONTROLLER) or _finished(
            tj, ("Complete", "Failed")
        ):
            return
        now = self._clock.now()
        status = copy.deepcopy(tj.get("status") or {})
        work = {"status": status}
        owned = children(self._store, JOBSETS, tj)
        if not owned:
            runtime = self._runtime(tj)
            if runtime is None:
                ref = spec.get("runtimeRef") or {}
                self._events.record(
                    tj,
                    "TrainingRuntimeNotFound",
                    f"runtime {ref.get('name')!r} not found",
                    "Warning",
                    "trainjob",
                )
                return
            create_child(self._store, JOBSETS, tj, self._jobset_for(tj, runtime))
            set_condition(work, "Created", "True", now, "JobSetCreated", "TrainJob's JobSet is created")
            self._write(tj, status, TRAINJOBS)
            return
        js = owned[0]
        status["jobsStatus"] = copy.deepcopy((js.get("status") or {}).get("replicatedJobsStatus") or [])
        if condition_true(js, "Failed"):
            set_condition(work, "Failed", "True", now, "JobsFailed", "TrainJob has failed")
        elif condition_true(js, "Completed"):
            set_condition(work, "Complete", "True", now, "JobsCompleted", "TrainJob is completed")
        self._write(tj, status, TRAINJOBS)

    @staticmethod
    def _jobset_for(tj: Obj, runtime: Obj) -> Obj:
        spec = tj.get("spec") or {}
        trainer = spec.get("trainer") or {}
        template = copy.deepcopy((runtime.get("spec") or {}).get("template") or {})
        js_spec: dict[str, Any] = template.get("spec") or {}
        overrides = spec.get("podSpecOverrides") or []
        for rjob in js_spec.get("replicatedJobs") or []:
            job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
            pod = job_spec.setdefault("template", {}).setdefault("spec", {})
            if rjob.get("name") == "node":
                run_for = (spec.get("annotations") or {}).get(ANN_DURATION)  # the sim's run time, to the pods
                if run_for is not None:
                    pmeta = job_spec["template"].setdefault("metadata", {})
                    pmeta["annotations"] = {**(pmeta.get("annotations") or {}), ANN_DURATION: run_for}
                nodes = int(trainer.get("numNodes") or 1)
                job_spec["parallelism"] = job_spec["completions"] = nodes
                job_spec.setdefault("completionMode", "Indexed")
                containers = pod.get("containers") or [{"name": "node"}]
                main = next((c for c in containers if c.get("name") == "node"), containers[0])
                for key in ("image", "command", "args", "env"):
                    if trainer.get(key):
                        main[key] = copy.deepcopy(trainer[key])
                if trainer.get("resourcesPerNode"):
                    main["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
                pod["containers"] = containers
            for o in overrides:
                if any(t.get("name") == rjob.get("name") for t in o.get("targetJobs") or ()):
                    if o.get("nodeSelector"):
                        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **o["nodeSelector"]}
                    if o.get("tolerations"):
                        pod["tolerations"] = [*(pod.get("tolerations") or []), *o["tolerations"]]
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": tj["metadata"]["name"],
                "labels": {
                    **dict(spec.get("labels") or {}),
                    "trainer.kubeflow.org/trainjob-name": tj["metadata"]["name"],
                },
                "annotations": dict(spec.get("annotations") or {}),
            },
            "spec": js_spec,
        }
