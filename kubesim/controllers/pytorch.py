"""The Kubeflow Training Operator's PyTorchJob controller (kubeflow.org/v1).

Pods <job>-master-0 and <job>-worker-<i> from spec.pytorchReplicaSpecs (Master, Worker), labelled
training.kubeflow.org/{job-name, replica-type, replica-index, operator-name} and owned by the job, with
the env the operator sets (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, PET_NNODES) on the "pytorch"
container. Conditions as the operator writes them: Created (PyTorchJobCreated), Running
(PyTorchJobRunning, every pod running), Succeeded (PyTorchJobSucceeded: the Master succeeded, or every
Worker when there is no Master), Failed (PyTorchJobFailed: a pod failed under restartPolicy Never);
status.replicaStatuses {active, succeeded, failed} per type, startTime, completionTime. On the end the
pods still running are deleted (cleanPodPolicy Running). A job whose spec.runPolicy.managedBy is not
kubeflow.org/training-operator is left alone. Not simulated: services, elastic policy, OnFailure
restarts counted against backoffLimit, suspend.
"""

from __future__ import annotations

import copy

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.owned import children, create_pod, delete_child, reconciled_by
from kubesim.controllers.pods import condition_true, is_terminal, phase, set_condition
from kubesim.store import Obj, ObjectStore, WatchEvent, rfc3339

PYTORCHJOBS = "pytorchjobs.kubeflow.org"
OPERATOR = "kubeflow.org/training-operator"
L = "training.kubeflow.org/"


class PyTorchJobController:
    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store, self._clock, self._events = store, clock, events
        self.dirty = True
        store.subscribe(PYTORCHJOBS, self._on_change)
        store.subscribe("pods", self._on_pod)

    def _on_change(self, event: WatchEvent) -> None:
        self.dirty = True

    def _on_pod(self, event: WatchEvent) -> None:
        if L + "job-name" in (event.obj["metadata"].get("labels") or {}):
            self.dirty = True

    def tick(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        for job in self._store.list(PYTORCHJOBS)[0]:
            self._reconcile(job)

    def _reconcile(self, job: Obj) -> None:
        spec = job.get("spec") or {}
        run = spec.get("runPolicy") or {}
        if not reconciled_by(run.get("managedBy"), OPERATOR):
            return
        if condition_true(job, "Succeeded") or condition_true(job, "Failed"):
            return
        now = self._clock.now()
        name = job["metadata"]["name"]
        status = copy.deepcopy(job.get("status") or {})
        work = {"status": status}
        replicas = spec.get("pytorchReplicaSpecs") or {}
        world = sum(int((r or {}).get("replicas") or 1) for r in replicas.values())
        has_master = "Master" in replicas
        pods = {p["metadata"]["name"]: p for p in children(self._store, "pods", job)}
        if not status.get("conditions"):
            set_condition(work, "Created", "True", now, "PyTorchJobCreated", f"PyTorchJob {name} is created.")
        rank = 0
        counts: dict[str, dict[str, int]] = {}
        all_running, failed, master_done = True, None, False
        for rtype in ("Master", "Worker"):
            rspec = replicas.get(rtype)
            if rspec is None:
                continue
            row = counts.setdefault(rtype, {"active": 0, "succeeded": 0, "failed": 0})
            for i in range(int(rspec.get("replicas") or 1)):
                pod_name = f"{name}-{rtype.lower()}-{i}"
                pod = pods.get(pod_name)
                if pod is None:
                    all_running = False
                    self._create(job, rtype, i, rank, world, rspec, has_master)
                elif phase(pod) == "Succeeded":
                    row["succeeded"] += 1
                    master_done = master_done or rtype == "Master"
                elif phase(pod) == "Failed":
                    row["failed"] += 1
                    failed = failed or pod
                else:
                    row["active"] += 1
                    all_running = all_running and phase(pod) == "Running"
                rank += 1
        status["replicaStatuses"] = counts
        status.setdefault("startTime", rfc3339(now))
        done = master_done if has_master else counts.get("Worker", {}).get("succeeded", 0) >= world
        if failed is not None:
            msg = f"PyTorchJob {name} is failed because 1 {failed['metadata']['name']} replica(s) failed."
            set_condition(work, "Running", "False", now, "PyTorchJobFailed", msg)
            set_condition(work, "Failed", "True", now, "PyTorchJobFailed", msg)
        elif done:
            set_condition(
                work,
                "Running",
                "False",
                now,
                "PyTorchJobSucceeded",
                f"PyTorchJob {name} is successfully completed.",
            )
            set_condition(
                work,
                "Succeeded",
                "True",
                now,
                "PyTorchJobSucceeded",
                f"PyTorchJob {name} is successfully completed.",
            )
            status["completionTime"] = rfc3339(now)
        elif all_running:
            set_condition(work, "Running", "True", now, "PyTorchJobRunning", f"PyTorchJob {name} is running.")
        if failed is not None or done:
            for pod in pods.values():
                if not is_terminal(pod):
                    delete_child(self._store, "pods", pod)
        if status != (job.get("status") or {}):

            def apply(o: Obj) -> None:
                o["status"] = status

            self._store.mutate(PYTORCHJOBS, job["metadata"].get("namespace") or "", name, apply)

    def _create(
        self, job: Obj, rtype: str, index: int, rank: int, world: int, rspec: Obj, has_master: bool
    ) -> None:
        name = job["metadata"]["name"]
        template = copy.deepcopy(rspec.get("template") or {})
        pod = template.setdefault("spec", {})
        pod["restartPolicy"] = rspec.get("restartPolicy") or "Never"
        master = f"{name}-master-0" if has_master else f"{name}-worker-0"
        env = [
            {"name": "MASTER_ADDR", "value": master},
            {"name": "MASTER_PORT", "value": "23456"},
            {"name": "WORLD_SIZE", "value": str(world)},
            {"name": "RANK", "value": str(rank)},
            {"name": "PET_NNODES", "value": str(world)},
        ]
        for c in pod.get("containers") or ():
            if c.get("name") == "pytorch":
                c["env"] = [*(c.get("env") or []), *env]
        labels = {
            L + "job-name": name,
            L + "replica-type": rtype.lower(),
            L + "replica-index": str(index),
            L + "operator-name": "pytorchjob-controller",
        }
        if rtype == "Master":
            labels[L + "job-role"] = "master"
        create_pod(
            self._store,
            self._events,
            job,
            f"{name}-{rtype.lower()}-{index}",
            template,
            labels,
            "pytorchjob-controller",
        )
