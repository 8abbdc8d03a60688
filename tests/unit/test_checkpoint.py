"""The checkpoint contract (docs/migration.md) as tables: the stop path per trigger, the contract parsed
from a native spec and from a plain Job (bad values refused with the field named), the env and grace
period an attempt's pod gets, the reference read from a stopped pod, and kubesim's simulated save."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError

from broker.core import safe_yaml
from broker.core.errors import InvalidRequest
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.intake.parse import spec_of
from broker.workload import checkpoint
from broker.workload.manifest import build_workload
from broker.workload.stop_path import STOP_MARGIN_SECONDS, StopPath, StopPlan, Trigger, choose
from kubesim.controllers import checkpoints as sim

# --------------------------------------------------------------------------- the stop path per trigger

_CKPT = StopPlan(StopPath.CHECKPOINT, 30, 30 + STOP_MARGIN_SECONDS)
_PLAIN = StopPlan(StopPath.PLAIN)
_REPORTED = StopPlan(StopPath.REPORTED)


@pytest.mark.parametrize(
    ("trigger", "grace", "answers", "plan"),
    [
        (Trigger.MIGRATE, 30, True, _CKPT),
        (Trigger.MIGRATE, None, True, _PLAIN),
        (Trigger.PREEMPTION, 30, True, _CKPT),
        (Trigger.PREEMPTION, None, True, _PLAIN),
        (Trigger.BUDGET, 30, True, _CKPT),
        (Trigger.BUDGET, None, True, _PLAIN),
        (Trigger.DRAIN, 30, True, _CKPT),
        (Trigger.DRAIN, None, True, _PLAIN),
        (Trigger.MEMBER_LEFT, 30, True, _CKPT),
        (Trigger.MEMBER_LEFT, 30, False, _REPORTED),  # left and unreachable: cannot be asked
        (Trigger.FAILOVER, 30, True, _CKPT),  # failed over while it still answers
        (Trigger.FAILOVER, 30, False, _REPORTED),
        (Trigger.CLUSTER_LOST, 30, True, _REPORTED),  # lost: never asked, whatever it says
        (Trigger.CLUSTER_LOST, None, False, _REPORTED),
        (Trigger.DISRUPTED, 30, True, _REPORTED),  # the pods are gone already
        (Trigger.MIGRATE, 0, True, _PLAIN),
    ],
)
def test_the_stop_path_per_trigger(
    trigger: Trigger, grace: int | None, answers: bool, plan: StopPlan
) -> None:
    chosen = choose(trigger, grace, answers)
    assert chosen == plan
    assert chosen.asks_the_job is (plan.path is StopPath.CHECKPOINT)


# --------------------------------------------------------------------------- the contract parsed

_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  annotations: {gpufed.io/checkpoint-grace-seconds: "45"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: train
        image: ghcr.io/example/train:1.2
        resources: {limits: {nvidia.com/gpu: "4"}}
"""


def test_a_native_spec_and_a_plain_job_declare_the_contract() -> None:
    native = spec_of({"name": "train", "gpus": 4, "checkpoint": {"gracePeriodSeconds": 120}})
    assert native.to_request().checkpoint_grace_seconds == 120
    assert spec_of({"name": "train", "gpus": 4}).to_request().checkpoint_grace_seconds is None
    assert spec_of(safe_yaml.load(_JOB)).to_request().checkpoint_grace_seconds == 45


@pytest.mark.parametrize(
    ("checkpoint_value", "field"),
    [
        ({"gracePeriodSeconds": 0}, "checkpoint.gracePeriodSeconds"),
        ({"gracePeriodSeconds": 3601}, "checkpoint.gracePeriodSeconds"),
        ({"gracePeriodSeconds": "30"}, "checkpoint.gracePeriodSeconds"),  # strict: a string is refused
        ({"gracePeriodSeconds": 1.5}, "checkpoint.gracePeriodSeconds"),
        ({}, "checkpoint.gracePeriodSeconds"),
        ({"gracePeriodSeconds": 30, "path": "/ckpt"}, "checkpoint.path"),  # unknown keys are refused
    ],
)
def test_a_bad_native_contract_is_refused_naming_the_field(checkpoint_value: Any, field: str) -> None:
    with pytest.raises(RequestValidationError) as info:
        spec_of({"name": "train", "gpus": 4, "checkpoint": checkpoint_value})
    named = [".".join(str(p) for p in e["loc"]) for e in info.value.errors()]
    assert field in named, named


@pytest.mark.parametrize("value", ["0", "-5", "ten", "1.5", "", "99999"])
def test_a_bad_annotation_is_refused_naming_it(value: str) -> None:
    job = safe_yaml.load(_JOB)
    job["metadata"]["annotations"][checkpoint.GRACE_ANNOTATION] = value
    with pytest.raises(RequestValidationError) as info:
        spec_of(job)
    [error] = info.value.errors()
    assert error["loc"] == (f"metadata.annotations[{checkpoint.GRACE_ANNOTATION}]",)


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, 1), (30, 30), (" 600 ", 600), (3600, 3600), (True, None), (0, None), (3601, None), ("3e2", None)],
)
def test_parse_grace(value: object, ok: int | None) -> None:
    if ok is None:
        with pytest.raises(InvalidRequest) as info:
            checkpoint.parse_grace(value, "x.y")
        assert info.value.field == "x.y"
    else:
        assert checkpoint.parse_grace(value, "x.y") == ok


# --------------------------------------------------------------------------- what an attempt's pod gets

_WHERE = Placement("onprem-a", "H100-80GB", "nvidia.com/gpu", 4, 1, 100)
_TRAITS = ClusterTraits("onprem-a")


def _container(
    job: JobRequest, attempt: int, resume_from: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = build_workload("j1", attempt, job, _WHERE, _TRAITS, resume_from=resume_from).job["spec"]
    pod_spec = spec["template"]["spec"]
    return pod_spec, pod_spec["containers"][0]


@pytest.mark.parametrize(
    ("grace", "attempt", "resume_from", "env", "pod_grace"),
    [
        (30, 1, None, [{"name": "GPUFED_ATTEMPT", "value": "1"}], 30),
        (
            30,
            2,
            "s3://ckpt/step-900",
            [
                {"name": "GPUFED_ATTEMPT", "value": "2"},
                {"name": "GPUFED_RESUME_FROM", "value": "s3://ckpt/step-900"},
            ],
            30,
        ),
        (None, 2, "s3://ckpt/step-900", None, None),  # not a checkpointing job: nothing added
    ],
)
def test_the_env_and_grace_period_an_attempt_gets(
    grace: int | None, attempt: int, resume_from: str | None, env: Any, pod_grace: int | None
) -> None:
    job = JobRequest("t", gpus_per_pod=4, checkpoint_grace_seconds=grace)
    pod_spec, container = _container(job, attempt, resume_from)
    assert container.get("env") == env
    assert pod_spec.get("terminationGracePeriodSeconds") == pod_grace


def test_the_jobs_own_env_stays_and_its_own_resume_var_is_replaced() -> None:
    own = ({"name": "EPOCHS", "value": "3"}, {"name": "GPUFED_RESUME_FROM", "value": "stale"})
    job = JobRequest("t", gpus_per_pod=4, env=own, checkpoint_grace_seconds=10)
    _, container = _container(job, 3, "progress=12")
    assert container["env"] == [
        {"name": "EPOCHS", "value": "3"},
        {"name": "GPUFED_ATTEMPT", "value": "3"},
        {"name": "GPUFED_RESUME_FROM", "value": "progress=12"},
    ]


# --------------------------------------------------------------------------- the reference a pod leaves


def _pod(state: dict[str, Any], last: dict[str, Any] | None = None, annotation: str | None = None) -> Any:
    meta: dict[str, Any] = {"name": "p"}
    if annotation is not None:
        meta["annotations"] = {checkpoint.CHECKPOINT_ANNOTATION: annotation}
    return {"metadata": meta, "status": {"containerStatuses": [{"state": state, "lastState": last or {}}]}}


@pytest.mark.parametrize(
    ("pod", "reference"),
    [
        (_pod({"terminated": {"exitCode": 143, "message": "s3://b/step-9\n"}}), "s3://b/step-9"),
        (_pod({"terminated": {"exitCode": 143}}), None),  # saved nothing it could say
        (_pod({"running": {}}, {"terminated": {"message": "progress=4"}}), "progress=4"),
        (_pod({"terminated": {"exitCode": 137, "message": "   "}}), None),
        ({"metadata": {}, "status": {}}, None),
    ],
)
def test_the_reference_a_stopped_pod_leaves(pod: Any, reference: str | None) -> None:
    assert checkpoint.termination_reference(pod) == reference


def test_a_long_message_is_cut_as_the_kubelet_cuts_it_and_the_reported_one_is_read() -> None:
    long = "x" * 5000
    assert checkpoint.termination_reference(_pod({"terminated": {"message": long}})) == "x" * 4096
    assert checkpoint.reported_reference(_pod({"running": {}}, annotation="progress=30")) == "progress=30"
    assert checkpoint.reported_reference(_pod({"running": {}})) is None


# --------------------------------------------------------------------------- kubesim's simulated save


def _sim_pod(save: str | None, grace: int | None, resume: str | None = None) -> dict[str, Any]:
    annotations = {} if save is None else {sim.ANN_CHECKPOINT_SECONDS: save}
    meta: dict[str, Any] = {"name": "p", "annotations": annotations}
    if grace is not None:
        meta.update(deletionTimestamp="2026-01-01T00:01:00Z", deletionGracePeriodSeconds=grace)
    env = [] if resume is None else [{"name": "GPUFED_RESUME_FROM", "value": resume}]
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "env": env}]},
        "status": {"startTime": "2026-01-01T00:00:00Z"},
    }


_DELETED_AT = 1767225660.0  # 2026-01-01T00:01:00Z


@pytest.mark.parametrize(
    ("save", "grace", "due"),
    [
        ("5", 30, _DELETED_AT - 30 + 5),  # saves within its grace: exits 5 s after SIGTERM
        ("30", 30, _DELETED_AT - 30 + 30),
        ("31", 30, None),  # the grace period is too short for its save: killed at its end
        (None, 30, None),  # not a checkpointing workload
        ("5", None, None),  # not being deleted
    ],
)
def test_a_simulated_save_is_due_only_within_the_grace_period(
    save: str | None, grace: int | None, due: float | None
) -> None:
    assert sim.save_due(_sim_pod(save, grace)) == due


@pytest.mark.parametrize(
    ("resume", "resumed", "progress_at_90s"),
    [
        (None, 0.0, 90.0),
        ("progress=120", 120.0, 210.0),
        ("progress=350", 350.0, 400.0),
        ("s3://x", 0.0, 90.0),
    ],
)
def test_a_simulated_resume_runs_only_the_remainder(
    resume: str | None, resumed: float, progress_at_90s: float
) -> None:
    pod = _sim_pod("5", None, resume)
    assert sim.resumed_progress(pod) == resumed
    started = _DELETED_AT - 60
    assert sim.progress(copy.deepcopy(pod), started + 90, duration=400) == progress_at_90s
    assert sim.progress_text(120.0) == "progress=120"
