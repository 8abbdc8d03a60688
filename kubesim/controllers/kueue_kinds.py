"""The objects the simulated Kueue queues, one adapter per integration (Kueue's GenericJob).

Owns `Queued` and `QUEUED` (by store key) and `queued_kind(kind)`. Each adapter says, for its objects:
the Workload name prefix (Kueue's `<kind>-<name>-<hash>`), the pod sets (Kueue's PodSets(): a batch/v1
Job has one `main` of min(parallelism, completions) pods; a JobSet one per replicated Job, named after
it, of replicas x min(parallelism, completions) pods with the Job template's pod template; a RayJob
`head` (1 pod), one per worker group (replicas x numOfHosts) and `submitter` when it declares a
submitterPodTemplate), where the pod templates are (in pod-set order: admission merges each flavor's
node labels and tolerations into them, eviction restores them), how it is suspended and resumed
(spec.suspend for all three), whether it finished (and succeeded) and whether it still has active pods.
A JobSet made by a TrainJob is the TrainJob's (Kueue manages the owner, not the child). Pure helpers
over plain dicts; the controller (kueue.py) does the writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubesim.controllers.pods import condition_true

Obj = dict[str, Any]

JOBS = "jobs.batch"
JOBSETS = "jobsets.jobset.x-k8s.io"
RAYJOBS = "rayjobs.ray.io"


def _min_pods(job_spec: Obj) -> int:
    count = int(job_spec.get("parallelism", 1) or 1)
    completions = job_spec.get("completions")
    return count if completions is None else min(count, int(completions))


@dataclass(frozen=True)
class Queued:
    key: str
    api_version: str
    kind: str
    prefix: str
    templates: Callable[[Obj], list[tuple[str, int, Obj]]]  # (pod set, count, pod template) in order
    finished: Callable[[Obj], tuple[bool, bool]]  # (finished, succeeded)
    active: Callable[[Obj], bool]
    started: Callable[[Obj], bool]
    managed_elsewhere: Callable[[Obj], bool] = lambda obj: False

    def pod_sets(self, obj: Obj) -> list[Obj]:
        """Kueue's PodSets of the object (templates copied by the caller)."""
        return [{"name": n, "count": c, "template": t} for n, c, t in self.templates(obj)]


# ------------------------------------------------------------------ batch/v1 Job


def _job_templates(job: Obj) -> list[tuple[str, int, Obj]]:
    spec = job.setdefault("spec", {})
    return [("main", _min_pods(spec), spec.setdefault("template", {}))]


def _job_finished(job: Obj) -> tuple[bool, bool]:
    ok = condition_true(job, "Complete")
    return ok or condition_true(job, "Failed"), ok


# ------------------------------------------------------------------ JobSet


def _jobset_templates(js: Obj) -> list[tuple[str, int, Obj]]:
    out = []
    for rjob in (js.get("spec") or {}).get("replicatedJobs") or ():
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        count = int(rjob.get("replicas") or 1) * _min_pods(job_spec)
        out.append((str(rjob.get("name")), count, job_spec.setdefault("template", {})))
    return out


def _jobset_finished(js: Obj) -> tuple[bool, bool]:
    ok = condition_true(js, "Completed")
    return ok or condition_true(js, "Failed"), ok


def _jobset_active(js: Obj) -> bool:
    rows = (js.get("status") or {}).get("replicatedJobsStatus") or ()
    return any(int(r.get("active") or 0) > 0 for r in rows)


def _jobset_started(js: Obj) -> bool:
    rows = (js.get("status") or {}).get("replicatedJobsStatus") or ()
    return any(int(r.get(k) or 0) > 0 for r in rows for k in ("active", "ready", "succeeded", "failed"))


def _owned_by_trainjob(js: Obj) -> bool:
    return any(r.get("kind") == "TrainJob" for r in js["metadata"].get("ownerReferences") or ())


# ------------------------------------------------------------------ RayJob


def _rayjob_templates(rj: Obj) -> list[tuple[str, int, Obj]]:
    spec = rj.setdefault("spec", {})
    cluster = spec.setdefault("rayClusterSpec", {})
    head = cluster.setdefault("headGroupSpec", {}).setdefault("template", {})
    out: list[tuple[str, int, Obj]] = [("head", 1, head)]
    for group in cluster.get("workerGroupSpecs") or ():
        count = int(group.get("replicas") or 0) * int(group.get("numOfHosts") or 1)
        out.append((str(group.get("groupName")), count, group.setdefault("template", {})))
    submitter = spec.get("submitterPodTemplate")
    if isinstance(submitter, dict) and submitter.get("spec"):
        out.append(("submitter", 1, submitter))
    return out


def _rayjob_finished(rj: Obj) -> tuple[bool, bool]:
    status = rj.get("status") or {}
    deployment = status.get("jobDeploymentStatus")
    return deployment in ("Complete", "Failed"), deployment == "Complete" and status.get(
        "jobStatus"
    ) == "SUCCEEDED"


def _rayjob_active(rj: Obj) -> bool:
    return (rj.get("status") or {}).get("jobDeploymentStatus") in ("Initializing", "Running")


QUEUED: dict[str, Queued] = {
    q.key: q
    for q in (
        Queued(
            JOBS,
            "batch/v1",
            "Job",
            "job",
            _job_templates,
            _job_finished,
            lambda j: bool((j.get("status") or {}).get("active")),
            lambda j: bool((j.get("status") or {}).get("startTime")),
        ),
        Queued(
            JOBSETS,
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            "jobset",
            _jobset_templates,
            _jobset_finished,
            _jobset_active,
            _jobset_started,
            _owned_by_trainjob,
        ),
        Queued(
            RAYJOBS,
            "ray.io/v1",
            "RayJob",
            "rayjob",
            _rayjob_templates,
            _rayjob_finished,
            _rayjob_active,
            lambda rj: bool(
                (rj.get("status") or {}).get("jobDeploymentStatus") not in (None, "", "Suspended")
            ),
        ),
    )
}

_BY_KIND = {q.kind: q for q in QUEUED.values()}


def queued_kind(kind: object) -> Queued | None:
    """The adapter of a Workload owner's kind (its ownerReference's kind)."""
    return _BY_KIND.get(str(kind))


def owner_of(wl: Obj) -> tuple[Queued, Obj] | None:
    """The queued object's adapter and the Workload's controller ownerReference."""
    for ref in wl["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            q = queued_kind(ref.get("kind"))
            if q is not None:
                return q, dict(ref)
    return None
