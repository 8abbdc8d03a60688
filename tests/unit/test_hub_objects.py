"""kubectl-native submission through a hub (docs/hub.md), the pure part: a hub object as the API server
keeps it (defaults filled in, managedBy, what the broker wrote back) becomes the manifest `POST /v1/jobs`
takes; the tenant comes from the hub namespace; the status written back mirrors the member object's; a
refusal is a Failed condition naming the field; the `hub:` config names its bad fields."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError

from broker.config.settings import parse_fleet_config
from broker.core.errors import ConfigError, InvalidRequest
from broker.intake.parse import spec_of
from broker.workload import hub_objects as hub
from kubesim import validation
from kubesim.resources import BY_KEY

JOB = hub.BATCH_JOB


def manifest(**spec: Any) -> dict[str, Any]:
    """A batch/v1 Job as a user applies it to the hub."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "labels": {"team": "vision"},
            "annotations": {"gpufed.io/gpu-products": "H100-80GB"},
        },
        "spec": {
            "managedBy": hub.MANAGED_BY,
            "backoffLimit": 0,
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "ghcr.io/example/train:1.2",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                }
            },
            **spec,
        },
    }


def as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the hub's API server keeps it: kubesim's create defaulting (the real server's:
    selector, controller labels, backoffLimit 6 when unset, pod and container defaults), a uid, a status,
    kubectl's last-applied copy and what the broker wrote back."""
    stored = copy.deepcopy(obj)
    meta = stored["metadata"]
    meta.update(
        {"uid": "0f9c", "resourceVersion": "41", "generation": 1, "creationTimestamp": "2026-12-02T10:00:00Z"}
    )
    meta["annotations"] = {
        **meta.get("annotations", {}),
        hub.LAST_APPLIED: json.dumps(obj),
        hub.JOB_ANNOTATION: "j0123456789ab",
        hub.STATE_ANNOTATION: "RUNNING",
        "gpufed.io/cluster": "gpu-east",
    }
    meta["managedFields"] = [{"manager": "kubectl-client-side-apply"}]
    validation.apply_create_defaults(BY_KEY["jobs.batch"], stored, "2026-12-02T10:00:00Z")
    stored["status"] = {"active": 2}
    return stored


def test_a_stored_hub_job_submits_what_the_user_applied_without_managed_by() -> None:
    applied = manifest()
    body = hub.submission_of(as_stored(applied), JOB, "team-a")
    expected = copy.deepcopy(applied)
    del expected["spec"]["managedBy"]
    assert body["metadata"] == expected["metadata"]  # no uid, resourceVersion, last-applied, job id
    assert set(body["spec"]) == {"backoffLimit", "parallelism", "completions", "completionMode", "template"}
    assert "metadata" not in body["spec"]["template"]  # the controller's labels are gone
    assert spec_of(body).to_request() == spec_of(expected).to_request()


def test_the_servers_default_backoff_limit_is_unset_but_a_users_value_is_refused_by_name() -> None:
    applied = manifest()
    del applied["spec"]["backoffLimit"]  # the API server writes 6
    assert "backoffLimit" not in hub.submission_of(as_stored(applied), JOB, "team-a")["spec"]
    body = hub.submission_of(as_stored(manifest(backoffLimit=3)), JOB, "team-a")
    with pytest.raises(RequestValidationError) as caught:
        spec_of(body)
    assert [e["loc"] for e in caught.value.errors()] == [("spec.backoffLimit",)]


def test_a_pod_field_the_broker_cannot_honour_is_kept_so_it_is_refused_by_name() -> None:
    applied = manifest()
    applied["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    body = hub.submission_of(as_stored(applied), JOB, "team-a")
    with pytest.raises(RequestValidationError) as caught:
        spec_of(body)
    assert [e["loc"] for e in caught.value.errors()] == [("spec.template.spec.schedulerName",)]


def test_the_tenant_is_the_namespace_unless_mapped_and_an_annotation_cannot_change_it() -> None:
    assert hub.tenant_of("team-a", {}) == "team-a"
    assert hub.tenant_of("team-a", {"team-a": "vision"}) == "vision"
    same = manifest()
    same["metadata"]["annotations"]["gpufed.io/tenant"] = "vision"
    assert "gpufed.io/tenant" not in hub.submission_of(same, JOB, "vision")["metadata"]["annotations"]
    with pytest.raises(InvalidRequest) as caught:
        hub.submission_of(same, JOB, "team-a")
    assert caught.value.field == "metadata.annotations[gpufed.io/tenant]"
    assert "team-a" in caught.value.detail


def test_only_objects_managed_by_gpufed_are_the_brokers() -> None:
    assert hub.is_managed(manifest())
    assert not hub.is_managed(manifest(managedBy="kueue.x-k8s.io/multikueue"))
    plain = manifest()
    del plain["spec"]["managedBy"]
    assert not hub.is_managed(plain)
    ref = hub.ref_of(as_stored(manifest()), JOB)
    assert ref is not None and ref.source == "hub:jobs.batch/team-a/train" and ref.uid == "0f9c"
    assert hub.kind_of("jobs.batch") is JOB and hub.kind_of("deployments.apps") is None
    assert [k.resource for k in hub.WATCHED_KINDS] == [
        "jobs.batch",
        "jobsets.jobset.x-k8s.io",
        "rayjobs.ray.io",
        "trainjobs.trainer.kubeflow.org",
        "pytorchjobs.kubeflow.org",
    ]
    assert JOB.path("ns", "x") == "/apis/batch/v1/namespaces/ns/jobs/x"
    assert JOB.path() == "/apis/batch/v1/jobs"


MEMBER_DONE = {
    "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached"},
    ],
    "startTime": "2026-12-02T10:00:05Z",
    "completionTime": "2026-12-02T10:01:05Z",
    "succeeded": 2,
    "ready": 0,
    "uncountedTerminatedPods": {},
}


def test_the_member_status_is_mirrored_as_it_is_and_written_only_when_it_changed() -> None:
    want = hub.hub_status(JOB, "SUCCEEDED", "", MEMBER_DONE, {"active": 2}, "now")
    expected = {k: v for k, v in MEMBER_DONE.items() if k != "uncountedTerminatedPods"}
    assert want == expected
    running = {"active": 2, "ready": 2, "startTime": "2026-12-02T10:00:05Z"}
    assert hub.hub_status(JOB, "RUNNING", "", running, running, "now") is None


def test_a_held_hub_object_says_why_it_is_queued_and_then_that_it_was_placed() -> None:
    """While gpufed holds the job queued, the hub object carries gpufed.io/Queued with the queue's reason
    (issue 45: it showed nothing); a new reason is a new message, not a new transition; placed, it is False;
    the member's status, once there is one, replaces it."""
    reason = "0/1 clusters are available: 1 no node with 16 free H100-80GB (best: 8 on gpu-east)."
    queued = hub.hub_status(JOB, "QUEUED", reason, None, {}, "T1")
    assert queued is not None and hub.queued_message(queued) == reason
    by_type = {c["type"]: c for c in queued["conditions"]}
    c = by_type["gpufed.io/Queued"]
    assert (c["status"], c["reason"], c["lastTransitionTime"]) == ("True", "WaitingForPlacement", "T1")
    # a batch/v1 Job's own Suspended condition beside it: `kubectl get jobs` says Suspended, not Running
    suspended = by_type["Suspended"]
    assert (suspended["status"], suspended["reason"], suspended["message"]) == (
        "True",
        "GpufedQueued",
        reason,
    )
    assert hub.hub_status(JOB, "QUEUED", reason, None, queued, "T2") is None  # said already
    again = hub.hub_status(JOB, "QUEUED", "behind 1 job", None, queued, "T2")
    assert again is not None and hub.queued_message(again) == "behind 1 job"
    assert {c["lastTransitionTime"] for c in again["conditions"]} == {"T1"}
    placed = hub.hub_status(JOB, "PLACED", "placed on gpu-east", None, again, "T3")
    assert placed is not None and hub.queued_message(placed) is None
    assert {(c["type"], c["status"], c["reason"]) for c in placed["conditions"]} == {
        ("gpufed.io/Queued", "False", "Placed"),
        ("Suspended", "False", "Placed"),
    }
    # an Event is told when the reason changes more than its numbers (hub_sync)
    assert hub.reason_shape("1 no node with 8 free (best: 6 on c1)") == hub.reason_shape(
        "1 no node with 8 free (best: 7 on c1)"
    )
    assert hub.reason_shape("1 drained by root: firmware") != hub.reason_shape("1 unreachable")
    jobset = hub.kind_of("jobsets.jobset.x-k8s.io")
    assert jobset is not None
    held = hub.hub_status(jobset, "QUEUED", reason, None, {}, "T1")
    assert held is not None and [c["type"] for c in held["conditions"]] == [
        "gpufed.io/Queued"
    ]  # no Suspended
    assert hub.hub_status(JOB, "PLACED", "placed on gpu-east", None, placed, "T4") is None
    assert hub.hub_status(JOB, "RUNNING", "", None, {"active": 1}, "T4") is None  # never said queued
    running = {"active": 1}
    assert hub.hub_status(JOB, "RUNNING", "", running, placed, "T5") == running  # the member's status


def test_a_job_that_ended_without_a_member_object_gets_the_terminal_conditions() -> None:
    cancelled = hub.hub_status(JOB, "CANCELLED", "cancelled by user", None, {"active": 1}, "T")
    assert cancelled is not None
    assert [(c["type"], c["reason"]) for c in cancelled["conditions"]] == [
        ("FailureTarget", "GpufedCancelled"),
        ("Failed", "GpufedCancelled"),
    ]
    assert cancelled["active"] == 1
    done = hub.hub_status(JOB, "SUCCEEDED", "completed", None, {}, "T")
    assert done is not None and done["completionTime"] == "T"
    assert [c["type"] for c in done["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    # a hub object that already ended keeps its status
    assert hub.hub_status(JOB, "RUNNING", "", {"active": 2}, expected_done(), "T") is None
    assert (
        hub.is_finished(expected_done()) and not hub.is_finished({"active": 1}) and not hub.is_finished(None)
    )


def expected_done() -> dict[str, Any]:
    return {k: v for k, v in MEMBER_DONE.items() if k != "uncountedTerminatedPods"}


def test_a_refusal_is_a_failed_condition_naming_the_field() -> None:
    status = hub.refused_status(JOB, {}, "spec.template.spec.containers[1]", "one container per pod", "T")
    failed = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "GpufedRefused"
    assert failed[0]["message"] == "spec.template.spec.containers[1]: one container per pod"
    assert hub.is_finished(status)
    assert hub.hub_annotations("j1", "RUNNING", "gpu-east") == {
        "gpufed.io/job-id": "j1",
        "gpufed.io/state": "RUNNING",
        "gpufed.io/cluster": "gpu-east",
    }


BASE = {"clusters": [{"name": "a", "kubeconfig": "a.kubeconfig"}]}


@pytest.mark.parametrize(
    ("hub_doc", "field"),
    [
        ({"context": "x"}, "hub.kubeconfig"),
        ({"kubeconfig": "hub.kubeconfig", "tenantMapping": {"Team_A": "a"}}, "hub.tenantMapping"),
        ({"kubeconfig": "hub.kubeconfig", "tenantMapping": {"team-a": "Vision!"}}, "hub.tenantMapping"),
        ({"kubeconfig": "hub.kubeconfig", "namespaces": []}, "hub.namespaces"),
        ({"kubeconfig": "hub.kubeconfig", "namespaces": ["ok", "Not_ok"]}, "hub.namespaces"),
        ({"kubeconfig": "hub.kubeconfig", "discoverySeconds": 0}, "hub.discoverySeconds"),
        ({"kubeconfig": "hub.kubeconfig", "nameSpaces": ["a"]}, "hub.nameSpaces"),
    ],
)
def test_a_bad_hub_section_is_refused_naming_the_field(
    hub_doc: dict[str, Any], field: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_fleet_config({**BASE, "hub": hub_doc}, "clusters.yaml", tmp_path)
    assert f"clusters.yaml: {field}" in str(caught.value)


def test_the_hub_section_resolves_its_kubeconfig_against_the_config_file(tmp_path: Path) -> None:
    doc = {**BASE, "hub": {"kubeconfig": "hub.kubeconfig", "tenantMapping": {"team-a": "vision"}}}
    cfg = parse_fleet_config(doc, "clusters.yaml", tmp_path)
    assert cfg.hub is not None
    assert cfg.hub.kubeconfig == (tmp_path / "hub.kubeconfig").resolve()
    assert cfg.hub.tenant_mapping == {"team-a": "vision"} and cfg.hub.namespaces is None
