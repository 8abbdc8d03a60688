"""Job controller + kubelet: pods are created, run for their simulated duration and count towards the Job."""

from __future__ import annotations

import pytest

from kubesim import validation
from kubesim.resources import BY_KEY
from tests.unit.kubesim.world import batch_job, job_condition, pod_condition, pool, world


def test_indexed_job_with_parallelism_runs_all_completions() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create(
        "jobs.batch",
        batch_job(
            "train",
            {"nvidia.com/gpu": 2},
            duration=60,
            parallelism=2,
            completions=5,
            completionMode="Indexed",
            backoffLimit=0,
        ),
    )
    w.settle()
    pods = w.pods()
    assert len(pods) == 2
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == [
        "0",
        "1",
    ]
    job = w.job("train")
    uid = job["metadata"]["uid"]
    for p in pods:
        assert p["status"]["phase"] == "Running"
        assert p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train"
        assert p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == uid
        assert p["metadata"]["labels"]["app"] == "train"
        assert p["metadata"]["ownerReferences"][0] == {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert {
            "name": "JOB_COMPLETION_INDEX",
            "value": p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
        } in p["spec"]["containers"][0]["env"]
        assert pod_condition(p, "Ready")["status"] == "True"
        assert p["status"]["containerStatuses"][0]["state"]["running"]
    assert job["status"]["active"] == 2
    assert job["status"]["ready"] == 2
    w.advance(59)
    assert w.job("train")["status"].get("succeeded", 0) == 0
    w.advance(200)
    job = w.job("train")
    assert job["status"]["succeeded"] == 5
    assert job["status"]["completedIndexes"] == "0-4"
    complete = job_condition(job, "Complete")
    assert complete is not None and complete["reason"] == "CompletionsReached"
    criteria_met = job_condition(job, "SuccessCriteriaMet")
    assert criteria_met is not None and criteria_met["status"] == "True"
    assert job["status"]["completionTime"]
    done = w.pods()
    assert len(done) == 5 and all(p["status"]["phase"] == "Succeeded" for p in done)
    assert done[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_failing_pods_retry_until_the_backoff_limit_then_the_job_fails() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create(
        "jobs.batch", batch_job("flaky", {"nvidia.com/gpu": 1}, duration=10, exit_code=3, backoffLimit=2)
    )
    w.advance(15)
    assert w.job("flaky")["status"]["failed"] == 1
    assert job_condition(w.job("flaky"), "Failed") is None
    assert w.job("flaky")["status"]["active"] == 1
    w.advance(30)
    job = w.job("flaky")
    assert job["status"]["failed"] == 3
    failed = job_condition(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    failure_target = job_condition(job, "FailureTarget")
    assert failure_target is not None and failure_target["status"] == "True"
    assert "active" not in job["status"]
    pods = w.pods()
    assert len(pods) == 3 and all(p["status"]["phase"] == "Failed" for p in pods)
    assert pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert w.events("BackoffLimitExceeded")


def test_suspended_job_creates_no_pods_until_resumed() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("jobs.batch", batch_job("later", {"nvidia.com/gpu": 1}, suspend=True))
    w.settle()
    assert w.pods() == []
    suspended = job_condition(w.job("later"), "Suspended")
    assert suspended is not None and suspended["status"] == "True"
    w.store.mutate("jobs.batch", "default", "later", lambda j: j["spec"].__setitem__("suspend", False))
    w.settle()
    assert len(w.pods()) == 1
    cond = job_condition(w.job("later"), "Suspended")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "JobResumed"


def test_deleting_a_job_garbage_collects_its_pods() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("jobs.batch", batch_job("gone", {"nvidia.com/gpu": 1}, parallelism=3, completions=3))
    w.settle()
    assert len(w.pods()) == 3
    w.store.delete("jobs.batch", "default", "gone")
    w.settle()
    assert w.pods() == []


def test_pods_on_a_deleted_node_fail_and_the_job_replaces_them() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)]})
    w.store.create("jobs.batch", batch_job("j", {"nvidia.com/gpu": 8}, duration=100))
    w.settle()
    (first,) = w.pods()
    w.store.delete("nodes", "", first["spec"]["nodeName"])
    w.settle()
    lost = w.pod(first["metadata"]["name"])
    assert lost["status"]["phase"] == "Failed"
    assert pod_condition(lost, "DisruptionTarget")["reason"] == "DeletionByPodGC"
    running = [p for p in w.pods() if p["status"]["phase"] == "Running"]
    assert len(running) == 1 and running[0]["spec"]["nodeName"] != first["spec"]["nodeName"]


def test_a_job_managed_by_another_controller_is_left_alone_and_its_manager_is_immutable() -> None:
    """JobManagedBy (GA in Kubernetes 1.35): a Job whose spec.managedBy is not kubernetes.io/job-controller
    gets no pods and no status from the built-in controller (MultiKueue's and gpufed's hub copies), and
    the field cannot be changed afterwards."""
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    managed = batch_job("hubjob", {"nvidia.com/gpu": 1}, duration=10, backoffLimit=0)
    managed["spec"]["managedBy"] = "gpufed.io/broker"
    w.store.create("jobs.batch", managed)
    builtin = batch_job("plain", {"nvidia.com/gpu": 1}, duration=10, backoffLimit=0)
    builtin["spec"]["managedBy"] = "kubernetes.io/job-controller"
    w.store.create("jobs.batch", builtin)
    w.advance(30)
    assert [p["metadata"]["labels"]["batch.kubernetes.io/job-name"] for p in w.pods()] == ["plain"]
    assert not w.job("hubjob").get("status")
    assert job_condition(w.job("plain"), "Complete") is not None
    old = w.job("hubjob")
    new = {**old, "spec": {**old["spec"], "managedBy": "kubernetes.io/job-controller"}}
    with pytest.raises(Exception, match=r"spec\.managedBy"):
        validation.validate_update(BY_KEY["jobs.batch"], old, new)
