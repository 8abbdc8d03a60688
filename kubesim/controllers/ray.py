"""KubeRay's RayJob and RayCluster controllers (ray.io/v1).

RayCluster: a head pod <cluster>-head and, per spec.workerGroupSpecs[i], replicas x numOfHosts worker pods
<cluster>-<group>-worker-<n>, labelled ray.io/{cluster, node-type, group, is-ray-node}, owned by the
cluster; Ray pods run until deleted (restartPolicy Always, a duration annotation is not theirs: the sim
runs the job in the submitter); a failed or lost pod is replaced. status.state "ready" once every pod is
Running and Ready (desired/ready/availableWorkerReplicas, the HeadPodReady and RayClusterProvisioned
conditions).

RayJob: a RayCluster <job>-raycluster from spec.rayClusterSpec (status.rayClusterName, jobId,
jobDeploymentStatus Initializing); once it is ready, Running, and the submitter: a batch/v1 Job named as
the RayJob (submitterPodTemplate, else one container "ray-job-submitter" on the head's image running
`ray job submit -- <entrypoint>`, with the head's tolerations: a sim convenience); it runs as long as the head template's sim.gpufed.io/duration-seconds
annotation says). jobStatus follows it: RUNNING, then SUCCEEDED (jobDeploymentStatus Complete) or FAILED
(jobDeploymentStatus Failed, reason AppFailed). With shutdownAfterJobFinishes the RayCluster is deleted
ttlSecondsAfterFinished after the end. spec.managedBy other than ray.io/kuberay-operator is left alone.
spec.suspend (Kueue's): no RayCluster and no submitter (both deleted if there), jobDeploymentStatus
Suspended; resumed, it starts over from Initializing.
Not simulated: HTTPMode/SidecarMode submission (run as K8sJobMode), autoscaling, clusterSelector,
activeDeadlineSeconds, retries (backoffLimit).
"""

from __future__ import annotations

import copy
import hashlib

from kubesim.clock import SimClock
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.jobs import _epoch
from kubesim.controllers.owned import children, create_child, create_pod, delete_child, reconciled_by
from kubesim.controllers.pods import ANN_DURATION, condition_true, is_terminal, phase, set_condition
from kubesim.store import Obj, ObjectStore, WatchEvent, rfc3339

RAYJOBS = "rayjobs.ray.io"
RAYCLUSTERS = "rayclusters.ray.io"
JOBS = "jobs.batch"
OPERATOR = "ray.io/kuberay-operator"


def _ready(pod: Obj) -> bool:
    return phase(pod) == "Running" and condition_true(pod, "Ready")


class RayController:
    def __init__(self, store: ObjectStore, clock: SimClock, events: EventRecorder) -> None:
        self._store, self._clock, self._events = store, clock, events
        self.dirty = True
        self._due: float | None = None
        store.subscribe(RAYJOBS, self._on_change)
        store.subscribe(RAYCLUSTERS, self._on_change)
        store.subscribe("pods", self._on_labelled)
        store.subscribe(JOBS, self._on_labelled)

    @property
    def next_due(self) -> float | None:
        return self._due

    def _on_change(self, event: WatchEvent) -> None:
        self.dirty = True

    def _on_labelled(self, event: WatchEvent) -> None:
        labels = event.obj["metadata"].get("labels") or {}
        if "ray.io/cluster" in labels or "ray.io/originated-from-crd" in labels:
            self.dirty = True

    def tick(self) -> None:
        now = self._clock.now()
        if not self.dirty and not (self._due is not None and self._due <= now):
            return
        self.dirty, self._due = False, None
        for rc in self._store.list(RAYCLUSTERS)[0]:
            self._cluster(rc)
        for rj in self._store.list(RAYJOBS)[0]:
            self._job(rj, now)

    # ------------------------------------------------------------------ RayCluster

    def _cluster(self, rc: Obj) -> None:
        if rc["metadata"].get("deletionTimestamp"):
            return
        name = rc["metadata"]["name"]
        spec = rc.get("spec") or {}
        pods = {p["metadata"]["name"]: p for p in children(self._store, "pods", rc)}
        wanted: list[tuple[str, str, str, Obj]] = [
            (f"{name}-head", "head", "headgroup", (spec.get("headGroupSpec") or {}).get("template") or {})
        ]
        desired = 0
        for group in spec.get("workerGroupSpecs") or []:
            count = int(group.get("replicas", group.get("minReplicas", 1)) or 0) * int(
                group.get("numOfHosts") or 1
            )
            desired += count
            for i in range(count):
                wanted.append(
                    (
                        f"{name}-{group['groupName']}-worker-{i}",
                        "worker",
                        str(group["groupName"]),
                        group.get("template") or {},
                    )
                )
        ready_workers = 0
        head_ready = False
        for pod_name, node_type, group_name, template in wanted:
            pod = pods.get(pod_name)
            if pod is not None and is_terminal(pod):
                delete_child(self._store, "pods", pod)  # Ray replaces a failed node
                continue
            if pod is None:
                tmpl = copy.deepcopy(template)
                meta = tmpl.setdefault("metadata", {})
                meta["annotations"] = {
                    k: v for k, v in (meta.get("annotations") or {}).items() if k != ANN_DURATION
                }
                tmpl.setdefault("spec", {})["restartPolicy"] = "Always"
                labels = {
                    "ray.io/cluster": name,
                    "ray.io/node-type": node_type,
                    "ray.io/group": group_name,
                    "ray.io/is-ray-node": "yes",
                }
                create_pod(self._store, self._events, rc, pod_name, tmpl, labels, "raycluster-controller")
                continue
            if _ready(pod):
                if node_type == "head":
                    head_ready = True
                else:
                    ready_workers += 1
        now = self._clock.now()
        status = copy.deepcopy(rc.get("status") or {})
        work = {"status": status}
        status.update(
            {
                "desiredWorkerReplicas": desired,
                "readyWorkerReplicas": ready_workers,
                "availableWorkerReplicas": ready_workers,
                "state": "ready" if head_ready and ready_workers >= desired else status.get("state", ""),
            }
        )
        if not status["state"]:
            status.pop("state")
        set_condition(
            work,
            "HeadPodReady",
            "True" if head_ready else "False",
            now,
            "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound",
        )
        if head_ready and ready_workers >= desired:
            set_condition(
                work,
                "RayClusterProvisioned",
                "True",
                now,
                "AllPodRunningAndReadyFirstTime",
                "All Ray Pods are ready for the first time",
            )
        self._write(RAYCLUSTERS, rc, status)

    # ------------------------------------------------------------------ RayJob

    def _job(self, rj: Obj, now: float) -> None:
        spec = rj.get("spec") or {}
        if not reconciled_by(spec.get("managedBy"), OPERATOR):
            return
        name = rj["metadata"]["name"]
        status = copy.deepcopy(rj.get("status") or {})
        deployment = status.get("jobDeploymentStatus") or ""
        cluster_name = f"{name}-raycluster"
        rc = self._store.find(RAYCLUSTERS, rj["metadata"].get("namespace") or "", cluster_name)
        if deployment in ("Complete", "Failed"):
            if (
                spec.get("shutdownAfterJobFinishes")
                and rc is not None
                and not rc["metadata"].get("deletionTimestamp")
            ):
                end = _epoch(str(status.get("endTime") or ""), now)
                due = end + float(spec.get("ttlSecondsAfterFinished") or 0)
                if now >= due:
                    delete_child(self._store, RAYCLUSTERS, rc)
                else:
                    self._due = due if self._due is None else min(self._due, due)
            return
        if spec.get("suspend"):  # Kueue holds it: no cluster, no submitter (KubeRay's Suspended)
            if rc is not None and not rc["metadata"].get("deletionTimestamp"):
                delete_child(self._store, RAYCLUSTERS, rc)
            submitter = self._store.find(JOBS, rj["metadata"].get("namespace") or "", name)
            if submitter is not None and not submitter["metadata"].get("deletionTimestamp"):
                delete_child(self._store, JOBS, submitter)
            if deployment != "Suspended":
                status.update({"jobDeploymentStatus": "Suspended"})
                status.pop("jobStatus", None)
                self._write(RAYJOBS, rj, status)
            return
        if rc is None:
            body = {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {
                    "name": cluster_name,
                    "labels": {
                        "ray.io/originated-from-crd": "RayJob",
                        "ray.io/originated-from-cr-name": name,
                    },
                },
                "spec": copy.deepcopy(spec.get("rayClusterSpec") or {}),
            }
            create_child(self._store, RAYCLUSTERS, rj, body)
            digest = hashlib.sha256(str(rj["metadata"].get("uid")).encode()).hexdigest()[:5]
            status.update(
                {
                    "jobDeploymentStatus": "Initializing",
                    "rayClusterName": cluster_name,
                    "jobId": f"{name}-{digest}",
                    "startTime": rfc3339(now),
                }
            )
            self._write(RAYJOBS, rj, status)
            return
        if (rc.get("status") or {}).get("state") != "ready":
            return
        submitter = self._store.find(JOBS, rj["metadata"].get("namespace") or "", name)
        if submitter is None:
            create_child(self._store, JOBS, rj, self._submitter(rj))
            status.update({"jobDeploymentStatus": "Running", "jobStatus": "PENDING"})
            self._write(RAYJOBS, rj, status)
            return
        if condition_true(submitter, "Complete"):
            status.update(
                {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": rfc3339(now)}
            )
            status["succeeded"] = 1
        elif condition_true(submitter, "Failed"):
            status.update(
                {
                    "jobDeploymentStatus": "Failed",
                    "jobStatus": "FAILED",
                    "reason": "AppFailed",
                    "message": "the Ray job's submitter failed",
                    "endTime": rfc3339(now),
                }
            )
            status["failed"] = 1
        elif int((submitter.get("status") or {}).get("active") or 0) > 0:
            status.update({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
        if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
            self.dirty = True  # shut the cluster down on the next pass
        self._write(RAYJOBS, rj, status)

    @staticmethod
    def _submitter(rj: Obj) -> Obj:
        spec = rj.get("spec") or {}
        head = ((spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template") or {}
        head_containers = (head.get("spec") or {}).get("containers") or [{}]
        duration = ((head.get("metadata") or {}).get("annotations") or {}).get(ANN_DURATION)
        template = copy.deepcopy(spec.get("submitterPodTemplate") or {})
        if not template:  # the head's image; in the sim also its tolerations (GPU-tainted nodes only)
            template = {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "ray-job-submitter",
                            "image": head_containers[0].get("image", "rayproject/ray:2.46.0"),
                            "command": ["ray", "job", "submit", "--", str(spec.get("entrypoint", ""))],
                        }
                    ],
                }
            }
            tolerations = (head.get("spec") or {}).get("tolerations")
            if tolerations:
                template["spec"]["tolerations"] = copy.deepcopy(tolerations)
        template.setdefault("spec", {})["restartPolicy"] = "Never"
        if duration is not None:
            meta = template.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), ANN_DURATION: duration}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": rj["metadata"]["name"], "labels": {"ray.io/originated-from-crd": "RayJob"}},
            "spec": {"backoffLimit": 0, "parallelism": 1, "completions": 1, "template": template},
        }

    def _write(self, key: str, obj: Obj, status: Obj) -> None:
        if status == (obj.get("status") or {}):
            return

        def apply(o: Obj) -> None:
            o["status"] = status

        self._store.mutate(key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"], apply)
