"""Table tests of the pure member-trouble rules (broker.workload.member_trouble): what a pod and a Job
controller event say, which trouble a job shows, and what the broker does about it after how long."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from broker.core.model import (
    ClusterSummary,
    FailoverPolicy,
    Health,
    ImagePullFailure,
    JobRecord,
    JobRequest,
    JobState,
)
from broker.core.workloads import PodTrouble, Termination
from broker.intake.job_spec import JobSpec
from broker.scheduler.framework import Status
from broker.scheduler.placement import PlacementPolicy, prepare
from broker.scheduler.plugins.allowlist import ClusterAllowList
from broker.workload import member_trouble as mt
from broker.workload.k8s_job import to_native
from broker.workload.member_trouble import Act, TroublePolicy

SCHED = (
    "0/5 nodes are available: 5 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: "
    "5 No preemption victims found for incoming pod."
)
PULL = 'Failed to pull image "registry.invalid/x:1": rpc error: code = Unknown desc = lookup registry.invalid: no such host'


def pod(
    *,
    waiting: tuple[str, str] | None = None,
    terminated: tuple[str, int] | None = None,
    last: tuple[str, int] | None = None,
    unschedulable: str | None = None,
    node: str | None = None,
    evicted: str | None = None,
    name: str = "p-0",
) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "main", "state": {}, "lastState": {}}
    if waiting:
        cs["state"]["waiting"] = {"reason": waiting[0], "message": waiting[1]}
    if terminated:
        cs["state"]["terminated"] = {"reason": terminated[0], "exitCode": terminated[1]}
    if last:
        cs["lastState"]["terminated"] = {"reason": last[0], "exitCode": last[1]}
    status: dict[str, Any] = {"phase": "Pending", "containerStatuses": [cs], "conditions": []}
    if unschedulable is not None:
        status["conditions"].append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        )
    if evicted is not None:
        status.update(phase="Failed", reason="Evicted", message=evicted)
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("obj", "kind", "message"),
    [
        (pod(unschedulable=SCHED), "Unschedulable", SCHED),
        (pod(node="n1", waiting=("ErrImagePull", PULL)), "ErrImagePull", PULL),
        (
            pod(node="n1", waiting=("ImagePullBackOff", 'Back-off pulling image "x"')),
            "ImagePullBackOff",
            'Back-off pulling image "x"',
        ),
        (
            pod(node="n1", waiting=("CreateContainerConfigError", 'secret "db" not found')),
            "CreateContainerConfigError",
            'secret "db" not found',
        ),
        (
            pod(
                node="n1",
                waiting=("CrashLoopBackOff", "back-off 20s restarting failed container"),
                last=("Error", 2),
            ),
            "CrashLoopBackOff",
            "back-off 20s restarting failed container (last: Error, exit code 2)",
        ),
        (
            pod(node="n1", terminated=("OOMKilled", 137)),
            "OOMKilled",
            "container main was OOMKilled (exit code 137)",
        ),
        (
            pod(node="n1", evicted="The node was low on resource: memory."),
            "Evicted",
            "The node was low on resource: memory.",
        ),
        # the worst one wins: OOMKilled over the crash loop it causes
        (
            pod(node="n1", waiting=("CrashLoopBackOff", "back-off"), last=("OOMKilled", 137)),
            "OOMKilled",
            "container main was OOMKilled (exit code 137)",
        ),
    ],
)
def test_a_pods_trouble_in_the_members_words(obj: dict[str, Any], kind: str, message: str) -> None:
    trouble = mt.pod_trouble(obj)
    assert trouble == PodTrouble(kind, message, "p-0")


@pytest.mark.parametrize(
    "obj",
    [
        pod(node="n1"),  # running, nothing wrong
        pod(node="n1", waiting=("ContainerCreating", "")),  # starting
        pod(node="n1", terminated=("Completed", 0)),  # done
        pod(unschedulable=SCHED, node="n1"),  # bound since: the condition is history
        {
            **pod(unschedulable=SCHED),
            "status": {**pod(unschedulable=SCHED)["status"], "nominatedNodeName": "n1"},
        },
    ],
)
def test_a_pod_with_nothing_wrong_says_nothing(obj: dict[str, Any]) -> None:
    assert mt.pod_trouble(obj) is None


def test_the_last_failed_termination_and_its_exit_code() -> None:
    assert mt.pod_termination(pod(node="n", terminated=("Error", 2))) == Termination(
        "Error", 2, "p-0", "main"
    )
    assert mt.pod_termination(pod(node="n", last=("OOMKilled", 137))) == Termination(
        "OOMKilled", 137, "p-0", "main"
    )
    assert mt.pod_termination(pod(node="n", terminated=("Completed", 0))) is None


def test_a_failed_create_event_is_an_admission_refusal() -> None:
    msg = 'Error creating: pods "gf-x-0-" is forbidden: no PriorityClass with name production was found'
    event = {"reason": "FailedCreate", "message": msg, "involvedObject": {"kind": "Job", "name": "gf-x-0"}}
    assert mt.failed_create(event) == PodTrouble("FailedCreate", msg)
    assert mt.failed_create({**event, "reason": "SuccessfulCreate"}) is None
    assert mt.failed_create({**event, "involvedObject": {"kind": "ReplicaSet"}}) is None


def test_worst_orders_by_severity_then_pod() -> None:
    a = PodTrouble("Unschedulable", "m", "p-1")
    b = PodTrouble("ImagePullBackOff", "m", "p-2")
    c = PodTrouble("ImagePullBackOff", "m", "p-0")
    assert mt.worst([a, b, None, c]) == c
    assert mt.worst([None]) is None


def record(**request: Any) -> JobRecord:
    return JobRecord(
        id="j1",
        request=JobRequest("r", gpus_per_pod=1, **request),
        state=JobState.ADMITTED,
        cluster="a",
        attempt=0,
    )


POLICY = TroublePolicy(member_pending_seconds=120, image_pull_fail_seconds=300, avoid_seconds=600)


@pytest.mark.parametrize(
    ("kind", "waited", "asked", "act", "starts"),
    [
        ("Unschedulable", 119, {}, Act.NOTE, "member trouble on a: Unschedulable: "),
        ("Unschedulable", 120, {}, Act.WITHDRAW, "withdrawn from a after 120 s: Unschedulable: "),
        ("FailedCreate", 200, {}, Act.WITHDRAW, "withdrawn from a after 200 s: FailedCreate: "),
        ("ErrImagePull", 299, {}, Act.NOTE, "member trouble on a: ErrImagePull: "),
        ("ImagePullBackOff", 300, {}, Act.FAIL, "image pull failed on a for 300 s: ImagePullBackOff: "),
        (
            "ImagePullBackOff",
            300,
            {"on_image_pull_failure": ImagePullFailure.REQUEUE},
            Act.WITHDRAW,
            "withdrawn from a after 300 s (onImagePullFailure: requeue): ImagePullBackOff: ",
        ),
        (
            "CreateContainerConfigError",
            10_000,
            {},
            Act.NOTE,
            "member trouble on a: CreateContainerConfigError",
        ),
        ("CrashLoopBackOff", 10_000, {}, Act.NOTE, "member trouble on a: CrashLoopBackOff"),
        ("OOMKilled", 10_000, {}, Act.NOTE, "member trouble on a: OOMKilled"),
    ],
)
def test_judge(kind: str, waited: float, asked: dict[str, Any], act: Act, starts: str) -> None:
    verdict = mt.judge(record(**asked), PodTrouble(kind, "the words"), 1000.0, 1000.0 + waited, POLICY)
    assert verdict.act is act
    assert verdict.reason.startswith(starts), verdict.reason
    assert verdict.reason.endswith("the words")


def test_deadline_only_for_troubles_the_broker_acts_on() -> None:
    assert mt.deadline(PodTrouble("FailedCreate"), 10.0, POLICY) == 130.0
    assert mt.deadline(PodTrouble("ErrImagePull"), 10.0, POLICY) == 310.0
    assert mt.deadline(PodTrouble("CrashLoopBackOff"), 10.0, POLICY) is None


def test_pull_errors_alternating_are_one_spell() -> None:
    assert mt.group("ErrImagePull") == mt.group("ImagePullBackOff") == "pull"
    assert mt.group("Unschedulable") == mt.group("FailedCreate") == "pending"
    assert mt.group("OOMKilled") == "OOMKilled"


def test_failed_reason_adds_the_exit_code_once() -> None:
    t = Termination("Error", 2, "p", "main")
    reason = mt.failed_reason("failed on a: Job has reached the specified backoff limit", t)
    assert reason == (
        "failed on a: Job has reached the specified backoff limit (last termination: container main Error, exit code 2)"
    )
    assert mt.failed_reason(reason, t) == reason
    assert mt.failed_reason("failed on a", None) == "failed on a"


def test_avoid_keeps_a_cluster_away_for_a_while() -> None:
    r = record()
    avoid = mt.avoid(r, "a", 1000.0, POLICY)
    assert avoid == (("a", 1600.0),)
    r2 = JobRecord(id=r.id, request=r.request, avoid=(*avoid, ("b", 900.0)))
    assert mt.avoided(r2, 1000.0) == ("a",)  # b's time is over
    assert mt.avoided(r2, 1600.0) == ()
    assert mt.avoid(r2, "c", 1000.0, POLICY) == (("a", 1600.0), ("c", 1600.0))


def test_the_allowlist_filter_keeps_an_avoided_cluster_away_resolvably() -> None:
    plugin = ClusterAllowList()
    request = JobRequest("r", gpus_per_pod=1, avoid_clusters=("a",))
    job = prepare(request, PlacementPolicy())
    assert plugin.applies(job)
    verdict = plugin.filter(job, ClusterSummary("a", health=Health.HEALTHY), None, 0.0, ())
    assert isinstance(verdict, Status) and not verdict.code.name.endswith("UNRESOLVABLE")
    assert plugin.filter(job, ClusterSummary("b", health=Health.HEALTHY), None, 0.0, ()) == ()
    assert not plugin.applies(prepare(JobRequest("r", gpus_per_pod=1), PlacementPolicy()))


def test_failover_never_is_not_the_default() -> None:
    assert record().request.failover is FailoverPolicy.REQUEUE


def test_on_image_pull_failure_is_a_validated_job_field() -> None:
    spec = JobSpec.model_validate({"name": "j", "gpus": 1, "onImagePullFailure": "requeue"})
    assert spec.to_request().on_image_pull_failure is ImagePullFailure.REQUEUE
    assert (
        JobSpec.model_validate({"name": "j", "gpus": 1}).to_request().on_image_pull_failure
        is ImagePullFailure.FAIL
    )
    with pytest.raises(ValidationError) as bad:
        JobSpec.model_validate({"name": "j", "gpus": 1, "onImagePullFailure": "retry"})
    assert bad.value.errors()[0]["loc"] == ("onImagePullFailure",)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "annotations": {"gpufed.io/on-image-pull-failure": "requeue"}},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
    }
    assert to_native(job)["onImagePullFailure"] == "requeue"
