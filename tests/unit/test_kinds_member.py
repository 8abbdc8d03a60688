"""Level 2 for the workload kinds (the object itself with hints in each role's pod template) and the
kinds' status read back as the lifecycle's WorkloadStatus: table tests."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.model import ClusterTraits, JobRecord, JobRequest, JobState, Placement
from broker.core.workloads import WorkloadStatus
from broker.intake.parse import spec_of
from broker.workload import finished_ttl, lifecycle
from broker.workload.kinds import registry
from broker.workload.kinds.member import build_workload_any
from tests.unit.kind_objects import edited, jobset, pytorchjob, rayjob, trainjob

TRAITS = ClusterTraits("onprem-a", gang_scheduler="scheduler-plugins-scheduler", kueue_local_queue="gpufed")


def request_of(obj: dict[str, Any]) -> JobRequest:
    return registry.with_workload(obj, spec_of(obj).to_request())


def placement(
    pods: int, units: int = 1, resource: str = "nvidia.com/gpu", mig: str | None = None
) -> Placement:
    return Placement(
        cluster="onprem-a",
        product="A100-80GB",
        resource_name=resource,
        units_per_pod=units,
        pods=pods,
        score=50,
        mig_profile=mig,
        gfd_products=("NVIDIA-A100-SXM4-80GB",),
    )


def test_jobset_member_object_carries_the_hints_in_every_role() -> None:
    obj = edited(jobset(leader_gpus=None), "spec.managedBy", "gpufed.io/broker")
    req = request_of(obj)
    built = build_workload_any("J1", 2, req, placement(2), TRAITS, {"gpufed.io/request": "{}"})
    member = built.job
    assert (member["apiVersion"], member["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert member["metadata"]["name"] == "gf-j1-2" and member["metadata"]["namespace"] == "default"
    assert member["metadata"]["labels"]["gpufed.io/job-id"] == "J1"
    assert member["metadata"]["labels"]["gpufed.io/attempt"] == "2"
    assert member["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpufed"
    assert member["metadata"]["annotations"]["gpufed.io/cluster"] == "onprem-a"
    assert "managedBy" not in member["spec"]
    assert member["spec"]["suspend"] is True  # a Kueue member: Kueue's admission starts it
    leader, workers = (r["template"] for r in member["spec"]["replicatedJobs"])
    # child Jobs carry no broker labels: never swept as attempts
    assert "labels" not in leader.get("metadata", {})
    for rjob in (leader, workers):
        pod = rjob["spec"]["template"]
        assert pod["metadata"]["labels"]["gpufed.io/job-id"] == "J1"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gf-j1-2"
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
            "tolerations"
        ]
    leader_pod = leader["spec"]["template"]["spec"]
    worker_pod = workers["spec"]["template"]["spec"]
    assert "nodeSelector" not in leader_pod  # no GPU: not pinned to GPU nodes
    assert worker_pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert worker_pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    kinds = [c["kind"] for c in built.companions]
    assert "PodGroup" in kinds
    finished_ttl.apply(member, 600)
    assert member["spec"]["ttlSecondsAfterFinished"] == 600


KUEUE_CASES = [
    # id, object, where Kueue suspends it (None: created running, Kueue here does not admit the kind)
    ("jobset", jobset(), ("spec", "suspend")),
    ("rayjob", rayjob(), ("spec", "suspend")),
    ("pytorchjob", pytorchjob(), None),
    ("trainjob", trainjob(), None),
]


@pytest.mark.parametrize(("obj", "path"), [c[1:] for c in KUEUE_CASES], ids=[c[0] for c in KUEUE_CASES])
def test_kinds_on_a_kueue_member_are_created_suspended_with_the_queue_label(
    obj: dict[str, Any], path: tuple[str, ...] | None
) -> None:
    obj = edited(obj, "metadata.labels", {"kueue.x-k8s.io/priority-class": "high"})
    req = request_of(obj)
    for traits, queued in ((TRAITS, True), (ClusterTraits("onprem-a"), False)):
        member = build_workload_any("K1", 1, req, placement(req.pods), traits).job
        labels = member["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/priority-class"] == "high"  # the user's WorkloadPriorityClass kept
        assert ("kueue.x-k8s.io/queue-name" in labels) == queued
        if path is None:
            continue
        holder: Any = member
        for key in path[:-1]:
            holder = holder.get(key, {})
        assert holder.get(path[-1], False) is queued


def test_mig_placement_renames_the_gpu_resource_of_each_gpu_role() -> None:
    req = request_of(rayjob(workers=2))
    where = placement(2, 1, "nvidia.com/mig-1g.10gb", "1g.10gb")
    member = build_workload_any("R1", 0, req, where, ClusterTraits("onprem-a")).job
    cluster = member["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]
    assert "nvidia.com/gpu" not in str(head["containers"][0].get("resources", {}))
    assert worker["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert member["kind"] == "RayJob" and member["spec"]["entrypoint"]


def test_pytorchjob_and_trainjob_members() -> None:
    req = request_of(edited(pytorchjob(), "spec.runPolicy", {"managedBy": "gpufed.io/broker"}))
    member = build_workload_any("P1", 0, req, placement(3), ClusterTraits("onprem-a")).job
    assert "managedBy" not in member["spec"]["runPolicy"]
    for rspec in member["spec"]["pytorchReplicaSpecs"].values():
        assert rspec["template"]["metadata"]["labels"]["gpufed.io/attempt"] == "0"
    finished_ttl.apply(member, 60)
    assert member["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 60
    treq = request_of(trainjob(nodes=2))
    tmember = build_workload_any("T1", 1, treq, placement(2), ClusterTraits("onprem-a")).job
    (override,) = tmember["spec"]["podSpecOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    assert override["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert tmember["spec"]["runtimeRef"] == {"name": "torch-distributed"}
    finished_ttl.apply(tmember, 60)
    assert "ttlSecondsAfterFinished" not in tmember["spec"]


def _cond(kind: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": kind, "message": f"{kind} message"}


JS = jobset()
RJ = rayjob()


@pytest.mark.parametrize(
    ("obj", "status", "expect"),
    [
        (JS, {}, "admitted"),
        (
            JS,
            {
                "replicatedJobsStatus": [
                    {"name": "leader", "ready": 1},
                    {"name": "workers", "ready": 0, "active": 1},
                ]
            },
            "admitted",
        ),
        (
            JS,
            {"replicatedJobsStatus": [{"name": "leader", "ready": 1}, {"name": "workers", "ready": 1}]},
            "running",
        ),
        (JS, {"conditions": [_cond("Completed")]}, "succeeded"),
        (JS, {"conditions": [_cond("Failed")]}, "failed"),
        (JS, {"conditions": [{"type": "Completed", "status": "False"}]}, "admitted"),
        (RJ, {"jobDeploymentStatus": "Initializing"}, "admitted"),
        (RJ, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, "running"),
        (RJ, {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, "succeeded"),
        (RJ, {"jobDeploymentStatus": "Complete", "jobStatus": "FAILED"}, "failed"),
        (RJ, {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}, "failed"),
        (pytorchjob(), {"conditions": [_cond("Created")]}, "admitted"),
        (pytorchjob(), {"conditions": [_cond("Created"), _cond("Running")]}, "running"),
        (pytorchjob(), {"conditions": [_cond("Succeeded")]}, "succeeded"),
        (pytorchjob(), {"conditions": [_cond("Failed")]}, "failed"),
        (trainjob(), {"jobsStatus": [{"name": "node", "ready": 0, "active": 1}]}, "admitted"),
        (trainjob(), {"jobsStatus": [{"name": "node", "ready": 1}]}, "running"),
        (trainjob(), {"conditions": [_cond("Complete")]}, "succeeded"),
        (trainjob(), {"conditions": [_cond("Failed")]}, "failed"),
    ],
)
def test_status_of_each_kind_drives_the_lifecycle(
    obj: dict[str, Any], status: dict[str, Any], expect: str
) -> None:
    adapter = registry.kind_of(obj)
    assert adapter is not None
    req = request_of(obj)
    observed = adapter.status({**obj, "status": status}, "gf-x-0", "default", req.pods)
    record = JobRecord(id="x", request=req, state=JobState.PLACED, cluster="onprem-a", workload_name="gf-x-0")
    step = lifecycle.observe(record, observed, now=1.0)
    state = step.state if step is not None else JobState.PLACED
    assert state.value.lower() == expect, (state, step)


def test_a_lost_member_object_is_workload_lost() -> None:
    req = request_of(rayjob())
    record = JobRecord(id="x", request=req, state=JobState.RUNNING, cluster="a", workload_name="gf-x-0")
    step = lifecycle.observe(record, WorkloadStatus("gf-x-0", "default", exists=False), now=100.0)
    assert step is not None and step.state is JobState.QUEUED


class _Objects:
    """A gateway that reads objects (KindObjects) and Jobs: which one status sync asks depends on the kind."""

    def __init__(self, obj: dict[str, Any] | None) -> None:
        self.obj, self.asked = obj, []  # type: ignore[var-annotated]

    def read_object(self, cluster: str, api_version: str, kind: str, namespace: str, name: str) -> Any:
        self.asked.append((cluster, api_version, kind, namespace, name))
        return self.obj

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        self.asked.append((cluster, "batch/v1", "Job", namespace, name))
        return WorkloadStatus(name, namespace, exists=True, complete=True)


def test_status_sync_reads_a_kind_as_itself_and_a_job_as_a_job() -> None:
    from broker.workload.kinds import follow

    req = request_of(rayjob())
    done = {**rayjob(), "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}}
    gw = _Objects(done)
    status = follow.read_status(gw, "a", "default", "gf-x-0", req)  # type: ignore[arg-type]
    assert status.complete and gw.asked == [("a", "ray.io/v1", "RayJob", "default", "gf-x-0")]
    assert not follow.read_status(_Objects(None), "a", "default", "gf-x-0", req).exists  # type: ignore[arg-type]
    plain = JobRequest("p", gpus_per_pod=1)
    gw = _Objects(None)
    assert follow.read_status(gw, "a", "default", "gf-p-0", plain).complete  # type: ignore[arg-type]
    assert gw.asked == [("a", "batch/v1", "Job", "default", "gf-p-0")]
    record = JobRecord(id="k", request=req, state=JobState.PLACED, cluster="a")

    def never(_c: str) -> bool:
        return False

    assert follow.unwatched([record, JobRecord(id="p", request=plain)], set(), never) == [record]
    assert follow.unwatched([record], {"k"}, never) == []
    assert follow.unwatched([record], set(), lambda c: c == "a") == []  # its kinds are watched: by event


def test_a_checkpointing_kind_resumes_in_every_role() -> None:
    """docs/migration.md for the kinds: each role's pods get the grace period and the next attempt's
    GPUFED_ATTEMPT / GPUFED_RESUME_FROM, beside the env the user gave them."""
    from dataclasses import replace

    obj = edited(jobset(leader_gpus=None), "spec.managedBy", "gpufed.io/broker")
    req = replace(request_of(obj), checkpoint_grace_seconds=45)
    built = build_workload_any("J1", 3, req, placement(2), TRAITS, resume_from="progress=120")
    for rjob in built.job["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == 45
        for container in pod["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env") or ()}
            assert env["GPUFED_RESUME_FROM"] == "progress=120" and env["GPUFED_ATTEMPT"] == "3"
