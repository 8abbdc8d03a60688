"""Finalizers, graceful deletion and the Job controller's failure handling, on simulated time."""

from __future__ import annotations

from typing import Any

from kubesim.store import Obj
from tests.unit.kubesim.world import World, bare_pod, batch_job, job_condition, pod_condition, pool, world

TRACKING = "batch.kubernetes.io/job-tracking"


def _world() -> World:
    return world({"name": "c", "nodePools": [pool("h", 1)]})


def _job_pods(w: World, job: str) -> list[Obj]:
    return [p for p in w.pods() if p["metadata"]["labels"].get("job-name") == job]


def _drop_finalizers(w: World, key: str, name: str) -> None:
    w.store.mutate(key, "default", name, lambda o: o["metadata"].pop("finalizers", None))


def test_a_deleted_pod_runs_out_its_grace_period_and_a_finalizer_keeps_it() -> None:
    w = _world()
    pod = bare_pod("held", {"nvidia.com/gpu": 1}, duration=1000)
    pod["metadata"]["finalizers"] = ["example.com/hold"]
    pod["spec"]["terminationGracePeriodSeconds"] = 30
    w.store.create("pods", pod)
    w.settle()
    assert w.pod("held")["status"]["phase"] == "Running"
    marked, gone = w.store.request_delete("pods", "default", "held", 30)
    assert not gone and marked["metadata"]["deletionGracePeriodSeconds"] == 30
    w.advance(29)
    assert w.pod("held")["status"]["phase"] == "Running"  # still inside its grace period
    w.advance(2)
    killed = w.pod("held")  # the kubelet is done with it; the finalizer keeps the object
    assert killed["status"]["phase"] == "Failed"
    assert killed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert killed["metadata"]["deletionGracePeriodSeconds"] == 0
    w.advance(600)
    assert w.store.find("pods", "default", "held") is not None
    _drop_finalizers(w, "pods", "held")
    assert w.store.find("pods", "default", "held") is None


def test_a_job_with_a_finalizer_stays_until_it_is_removed_and_its_pods_lose_theirs() -> None:
    w = _world()
    job = batch_job("keep", {"nvidia.com/gpu": 1}, duration=100)
    job["metadata"]["finalizers"] = ["example.com/hold"]
    w.store.create("jobs.batch", job)
    w.settle()
    (pod,) = _job_pods(w, "keep")
    assert pod["metadata"]["finalizers"] == [TRACKING]
    w.store.request_delete("jobs.batch", "default", "keep")
    w.settle()
    assert w.job("keep")["metadata"]["deletionTimestamp"]
    assert not w.pod(pod["metadata"]["name"])["metadata"].get("finalizers")
    _drop_finalizers(w, "jobs.batch", "keep")
    w.settle()
    assert w.store.find("jobs.batch", "default", "keep") is None
    assert _job_pods(w, "keep") == []  # garbage collected


def test_job_counters_never_go_down_when_finished_pods_are_deleted() -> None:
    w = _world()
    w.store.create(
        "jobs.batch", batch_job("count", {"nvidia.com/gpu": 1}, duration=10, parallelism=3, completions=3)
    )
    w.advance(5)
    assert all(p["metadata"]["finalizers"] == [TRACKING] for p in _job_pods(w, "count"))
    w.advance(10)
    job = w.job("count")
    assert job["status"]["succeeded"] == 3 and job_condition(job, "Complete") is not None
    assert job["status"]["uncountedTerminatedPods"] == {}
    for p in _job_pods(w, "count"):
        assert not p["metadata"].get("finalizers")
        w.store.delete("pods", "default", p["metadata"]["name"])
    w.settle()
    assert w.job("count")["status"]["succeeded"] == 3


def test_failed_pods_stay_counted_after_they_are_deleted() -> None:
    w = _world()
    w.store.create(
        "jobs.batch", batch_job("flaky", {"nvidia.com/gpu": 1}, duration=10, exit_code=1, backoffLimit=5)
    )
    seen = []
    for _ in range(3):
        w.advance(10)
        for p in _job_pods(w, "flaky"):
            if p["status"]["phase"] == "Failed":
                w.store.delete("pods", "default", p["metadata"]["name"])
        w.settle()
        seen.append(w.job("flaky")["status"].get("failed", 0))
    assert seen == sorted(seen) and seen[-1] == 3


def _on_failure_job(name: str, codes: str, **spec: Any) -> Obj:
    job = batch_job(
        name, {"nvidia.com/gpu": 1}, duration=10, pod_extra={"restartPolicy": "OnFailure"}, **spec
    )
    job["spec"]["template"]["metadata"]["annotations"]["sim.gpufed.io/exit-codes"] = codes
    return job


def test_on_failure_restarts_the_container_in_place_with_backoff() -> None:
    w = _world()
    w.store.create("jobs.batch", _on_failure_job("retry", "1,1,0"))
    w.advance(11)
    (pod,) = _job_pods(w, "retry")
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running"
    assert status["restartCount"] == 1
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert pod_condition(pod, "Ready")["status"] == "False"
    w.advance(10)  # back-off 10s, then running again
    status = w.pod(pod["metadata"]["name"])["status"]["containerStatuses"][0]
    assert "running" in status["state"]
    w.advance(200)
    done = w.pod(pod["metadata"]["name"])
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["containerStatuses"][0]["restartCount"] == 2
    job = w.job("retry")
    assert job["status"]["succeeded"] == 1 and "failed" not in job["status"]
    assert w.events("BackOff")


def test_on_failure_restarts_count_towards_the_backoff_limit() -> None:
    w = _world()
    w.store.create("jobs.batch", _on_failure_job("crashy", "2", backoffLimit=2))
    w.advance(500)
    job = w.job("crashy")
    failed = job_condition(job, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 1  # the pod, deleted by the controller, counts once


def test_pod_failure_policy_fails_the_job_on_a_matching_exit_code() -> None:
    w = _world()
    job = batch_job("pfp", {"nvidia.com/gpu": 1}, duration=10, exit_code=42, backoffLimit=6)
    job["spec"]["podFailurePolicy"] = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
        ]
    }
    w.store.create("jobs.batch", job)
    w.advance(15)
    job = w.job("pfp")
    failed = job_condition(job, "Failed")
    (pod,) = _job_pods(w, "pfp")
    assert failed is not None and failed["reason"] == "PodFailurePolicy"
    assert failed["message"] == (
        f"Container main for pod default/{pod['metadata']['name']} failed with exit code 42 matching FailJob "
        "rule at index 0"
    )
    target = job_condition(job, "FailureTarget")
    assert target is not None and target["reason"] == "PodFailurePolicy"
    assert job["status"]["failed"] == 1


def test_pod_failure_policy_ignores_disruptions() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)]})
    job = batch_job("tolerant", {"nvidia.com/gpu": 8}, duration=100, backoffLimit=0)
    job["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    w.store.create("jobs.batch", job)
    w.settle()
    (first,) = _job_pods(w, "tolerant")
    w.store.delete("nodes", "", first["spec"]["nodeName"])  # PodGC fails it with DisruptionTarget
    w.settle()
    job = w.job("tolerant")
    assert job_condition(job, "Failed") is None and "failed" not in job["status"]
    running = [p for p in _job_pods(w, "tolerant") if p["status"]["phase"] == "Running"]
    assert len(running) == 1


def test_backoff_limit_per_index_fails_only_the_failing_index() -> None:
    w = _world()
    job = batch_job(
        "perindex",
        {"nvidia.com/gpu": 1},
        duration=10,
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=1,
    )
    job["spec"]["template"]["metadata"]["annotations"]["sim.gpufed.io/index-exit-codes"] = "1:3"
    w.store.create("jobs.batch", job)
    w.advance(100)
    job = w.job("perindex")
    assert job["status"]["completedIndexes"] == "0,2"
    assert job["status"]["failedIndexes"] == "1"
    assert job["status"]["failed"] == 2 and job["status"]["succeeded"] == 2
    failed = job_condition(job, "Failed")
    assert failed is not None and failed["reason"] == "FailedIndexes"
    assert failed["message"] == "Job has failed indexes"
    counts = sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"]
        for p in _job_pods(w, "perindex")
        if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    )
    assert counts == ["0", "1"]


def test_max_failed_indexes_fails_the_job_early() -> None:
    w = _world()
    job = batch_job(
        "maxidx",
        {"nvidia.com/gpu": 1},
        duration=10,
        exit_code=1,
        completions=4,
        parallelism=2,
        completionMode="Indexed",
        backoffLimitPerIndex=0,
        maxFailedIndexes=1,
    )
    w.store.create("jobs.batch", job)
    w.advance(100)
    failed = job_condition(w.job("maxidx"), "Failed")
    assert failed is not None and failed["reason"] == "MaxFailedIndexesExceeded"


def test_active_deadline_fails_the_job_once_its_pods_are_gone() -> None:
    w = _world()
    w.store.create(
        "jobs.batch", batch_job("slow", {"nvidia.com/gpu": 1}, duration=1000, activeDeadlineSeconds=60)
    )
    w.advance(61)
    job = w.job("slow")
    target = job_condition(job, "FailureTarget")
    assert target is not None and target["reason"] == "DeadlineExceeded"
    w.advance(60)  # the pod's grace period runs out
    job = w.job("slow")
    failed = job_condition(job, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == "Job was active longer than specified deadline"
    assert job["status"]["failed"] == 1 and "active" not in job["status"]


def test_ttl_after_finished_deletes_the_job_and_its_pods() -> None:
    w = _world()
    w.store.create(
        "jobs.batch", batch_job("brief", {"nvidia.com/gpu": 1}, duration=10, ttlSecondsAfterFinished=100)
    )
    w.advance(20)
    assert job_condition(w.job("brief"), "Complete") is not None
    w.advance(50)
    assert w.store.find("jobs.batch", "default", "brief") is not None
    w.advance(60)
    assert w.store.find("jobs.batch", "default", "brief") is None
    assert _job_pods(w, "brief") == []


def test_a_terminating_namespace_is_emptied_then_removed() -> None:
    w = _world()
    w.store.create("namespaces", {"metadata": {"name": "team"}, "spec": {"finalizers": ["kubernetes"]}})
    job = batch_job("inside", {"nvidia.com/gpu": 1}, duration=1000)
    job["metadata"]["namespace"] = "team"
    w.store.create("jobs.batch", job)
    held = bare_pod("held", duration=1000)
    held["metadata"].update(namespace="team", finalizers=["example.com/hold"])
    w.store.create("pods", held)
    w.settle()

    def terminate(ns: Obj) -> None:
        ns["metadata"].update(deletionTimestamp="2027-01-15T08:00:00Z", deletionGracePeriodSeconds=0)
        ns.setdefault("status", {})["phase"] = "Terminating"

    w.store.mutate("namespaces", "", "team", terminate)
    w.advance(60)
    ns = w.store.get("namespaces", "", "team")
    remaining = {c["type"]: c for c in ns["status"]["conditions"]}
    assert remaining["NamespaceContentRemaining"]["message"] == (
        "Some resources are remaining: pods has 1 resource instances"
    )
    assert remaining["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    )
    w.store.mutate("pods", "team", "held", lambda o: o["metadata"].pop("finalizers"))
    w.settle()
    assert w.store.find("namespaces", "", "team") is None
    assert w.store.list("jobs.batch", "team")[0] == []


def test_pods_stopped_by_a_suspend_do_not_count_as_failures() -> None:
    w = _world()
    w.store.create("jobs.batch", batch_job("paused", {"nvidia.com/gpu": 1}, duration=1000, backoffLimit=0))
    w.advance(5)
    w.store.mutate("jobs.batch", "default", "paused", lambda j: j["spec"].__setitem__("suspend", True))
    w.advance(60)
    job = w.job("paused")
    assert "failed" not in job["status"] and job_condition(job, "Failed") is None
    assert _job_pods(w, "paused") == []
    w.store.mutate("jobs.batch", "default", "paused", lambda j: j["spec"].__setitem__("suspend", False))
    w.settle()
    assert len(_job_pods(w, "paused")) == 1
