"""Member-side failures as the real components report them: image pulls that fail (kubelet + containerd),
a PriorityClass the member lacks (the API server's Priority admission plugin, through the Job
controller), crash loops under restartPolicy OnFailure (kubelet back-off), unschedulable pods."""

from __future__ import annotations

from kubesim.controllers import image_pull
from tests.unit.kubesim.world import batch_job, pod_condition, pool, world

BAD = "registry.invalid/team/train:1"


def _waiting(pod: dict) -> dict:  # type: ignore[type-arg]
    return dict(pod["status"]["containerStatuses"][0]["state"]["waiting"])


def test_an_image_under_registry_invalid_fails_with_err_image_pull_then_image_pull_backoff() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    job = batch_job("pull", {"nvidia.com/gpu": 1})
    job["spec"]["template"]["spec"]["containers"][0]["image"] = BAD
    w.store.create("jobs.batch", job)
    w.settle()
    (pod,) = w.pods()
    assert pod["status"]["phase"] == "Pending"
    assert _waiting(pod) == {
        "reason": "ErrImagePull",
        "message": 'rpc error: code = Unknown desc = failed to pull and unpack image "registry.invalid/team/'
        'train:1": failed to resolve reference "registry.invalid/team/train:1": failed to do request: Head '
        '"https://registry.invalid/v2/team/train/manifests/1": dial tcp: lookup registry.invalid: no such host',
    }
    assert pod_condition(pod, "Ready")["reason"] == "ContainersNotReady"
    failed = {e["message"] for e in w.events("Failed")}
    assert f'Failed to pull image "{BAD}": {image_pull.runtime_error(BAD)}' in failed
    assert "Error: ErrImagePull" in failed
    w.advance(2)
    (pod,) = w.pods()
    assert _waiting(pod) == {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{BAD}"'}
    backoff = w.events("BackOff")
    assert [(e["type"], e["message"]) for e in backoff] == [("Normal", f'Back-off pulling image "{BAD}"')]
    assert "Error: ImagePullBackOff" in {e["message"] for e in w.events("Failed")}
    # pulled again after the back-off (10 s, then 20 s ...): ErrImagePull again, never Running
    w.advance(60)
    (pod,) = w.pods()
    assert pod["status"]["phase"] == "Pending"
    pulling = [e for e in w.events("Pulling")]
    assert pulling and int(pulling[0].get("count") or 1) >= 3
    assert w.job("pull")["status"].get("active") == 1


def test_image_backoff_doubles_to_five_minutes() -> None:
    assert [image_pull.backoff_s(n) for n in (1, 2, 3, 6, 9)] == [10.0, 20.0, 40.0, 300.0, 300.0]


def test_a_pod_naming_a_missing_priority_class_is_refused_at_admission_with_a_failed_create_event() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create(
        "jobs.batch", batch_job("prio", {"nvidia.com/gpu": 1}, pod_extra={"priorityClassName": "production"})
    )
    w.settle()
    assert w.pods() == []
    (event,) = w.events("FailedCreate")
    assert event["type"] == "Warning" and event["source"]["component"] == "job-controller"
    assert event["message"] == (
        'Error creating: pods "prio-" is forbidden: no PriorityClass with name production was found'
    )


def test_an_existing_priority_class_is_resolved_and_the_pod_created() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create(
        "jobs.batch", batch_job("prio", {"nvidia.com/gpu": 1}, pod_extra={"priorityClassName": "gpu-high"})
    )
    w.settle()
    (pod,) = w.pods()
    assert pod["spec"]["priority"] == 100000
    assert w.events("FailedCreate") == []


def test_a_container_failing_again_and_again_under_on_failure_is_in_crash_loop_backoff() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create(
        "jobs.batch",
        batch_job(
            "crash", {"nvidia.com/gpu": 1}, duration=5, exit_code=2, pod_extra={"restartPolicy": "OnFailure"}
        ),
    )
    w.advance(6)
    (pod,) = w.pods()
    cs = pod["status"]["containerStatuses"][0]
    uid = pod["metadata"]["uid"]
    name = pod["metadata"]["name"]
    assert pod["status"]["phase"] == "Running"
    assert cs["restartCount"] == 1 and cs["lastState"]["terminated"]["exitCode"] == 2
    assert cs["state"]["waiting"] == {
        "reason": "CrashLoopBackOff",
        "message": f"back-off 10s restarting failed container=main pod={name}_default({uid})",
    }
    (event,) = w.events("BackOff")
    assert event["type"] == "Warning"
    assert event["message"] == f"Back-off restarting failed container main in pod {name}_default({uid})"


def test_an_unschedulable_pod_says_why_in_the_schedulers_words() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2, gpus=4)]})
    w.store.create("jobs.batch", batch_job("big", {"nvidia.com/gpu": 8}))
    w.settle()
    (pod,) = w.pods()
    cond = pod_condition(pod, "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )
    assert "0/2 nodes are available" in w.events("FailedScheduling")[0]["message"]
