"""What a Job must carry for its record to be rebuilt after a Redis loss, and how the rebuild reads it;
the HA settings (lease, renew) from the config file and the Helm chart's environment; crash points."""

from __future__ import annotations

import pytest

from broker.app.main import with_environment
from broker.config.settings import FleetConfig
from broker.controller import faults
from broker.core.errors import ConfigError
from broker.core.k8s_names import (
    CLOSED_ANNOTATION,
    FEDERATION_ANNOTATION,
    IDEMPOTENCY_ANNOTATION,
    REQUEST_ANNOTATION,
)
from broker.core.model import ClusterTraits, JobRequest, JobState, MigNeed, Placement
from broker.core.workloads import WorkloadRef
from broker.ha.recovery import newest_attempts, record_of
from broker.workload import manifest

REQUEST = JobRequest(
    "train",
    gpus_per_pod=2,
    pods=2,
    command=("python", "train.py"),
    gpu_products=("H100-80GB",),
    labels={"team": "nlp"},
    mig_need=None,
    duration_seconds=60,
)


def _ref(job_id: str, attempt: int, annotations: dict[str, str]) -> WorkloadRef:
    return WorkloadRef(f"gf-{job_id}-{attempt}", "default", job_id, attempt, annotations, 100.0)


def test_every_job_the_broker_creates_carries_the_request_its_key_and_its_federation() -> None:
    where = Placement("c1", "H100-80GB", "nvidia.com/gpu", 2, pods=2, score=0)
    notes = manifest.recovery_annotations(REQUEST, 12.5, "key-1", "gpufed")
    job = manifest.build_workload("j1", 1, REQUEST, where, ClusterTraits("c1"), notes).job
    annotations = job["metadata"]["annotations"]
    assert manifest.decode_request(annotations[REQUEST_ANNOTATION]) == REQUEST
    assert annotations[IDEMPOTENCY_ANNOTATION] == "key-1"
    assert annotations[FEDERATION_ANNOTATION] == "gpufed"
    assert annotations["gpufed.io/cluster"] == "c1"
    assert len(annotations[REQUEST_ANNOTATION]) < 400  # small: defaults are left out


def test_a_mig_request_round_trips_through_its_annotation() -> None:
    mig = JobRequest("m", mig_need=MigNeed(memory_gb=10, compute_slices=2), mig_slices_per_pod=2)
    text = manifest.recovery_annotations(mig, 0.0, None, None)[REQUEST_ANNOTATION]
    assert manifest.decode_request(text) == mig


def test_a_bad_request_annotation_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"gpufed\.io/request"):
        manifest.decode_request('{"gpus_per_pod": "many"}')


def test_the_rebuild_takes_the_newest_attempt_of_this_federation_only() -> None:
    mine = manifest.recovery_annotations(REQUEST, 50.0, "k", "gpufed")
    theirs = manifest.recovery_annotations(REQUEST, 50.0, None, "other")
    refs = [
        _ref("j1", 1, mine),
        _ref("j1", 2, mine),
        _ref("j2", 1, theirs),
        _ref("j3", 1, {FEDERATION_ANNOTATION: "gpufed"}),  # no request: cannot be rebuilt
    ]
    best, unreadable = newest_attempts(refs, "gpufed")
    assert {k: v.attempt for k, v in best.items()} == {"j1": 2} and unreadable == 1
    record = record_of(best["j1"], "c1", now=99.0)
    assert (record.state, record.attempt, record.cluster) == (JobState.PLACED, 2, "c1")
    assert record.workload_name == "gf-j1-2" and record.idempotency_key == "k"
    assert record.request == REQUEST and record.created_at == 50.0


def test_a_job_whose_newest_attempt_the_broker_closed_is_not_rebuilt() -> None:
    mine = manifest.recovery_annotations(REQUEST, 50.0, "k", "gpufed")
    closed = {**mine, CLOSED_ANNOTATION: "SUCCEEDED at 60.000"}
    refs = [
        _ref("j1", 1, closed),  # its end recorded: waits for its ttlSecondsAfterFinished, not reloaded
        _ref("j2", 1, closed),  # an older attempt, closed when it failed over ...
        _ref("j2", 2, mine),  # ... the newest one still runs
        _ref("j3", 1, mine),
        _ref("j3", 2, closed),  # the newest closed: an older unclosed attempt does not bring it back
    ]
    best, _ = newest_attempts(refs, "gpufed")
    assert {k: v.attempt for k, v in best.items()} == {"j2": 2}


def _cfg() -> FleetConfig:
    return FleetConfig.model_validate({"clusters": [{"name": "a", "kubeconfig": "/x", "tier": "on-prem"}]})


def test_lease_settings_come_from_the_charts_environment() -> None:
    cfg = with_environment(_cfg(), {"GPUFED_LEASE_SECONDS": "15", "GPUFED_LEASE_RENEW_SECONDS": "5"})
    assert (cfg.settings.lease_seconds, cfg.settings.lease_renew_seconds) == (15.0, 5.0)
    assert _cfg().settings.lease_seconds == 10.0  # the default


def test_a_renew_period_that_outlives_the_lease_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="leaseRenewSeconds"):
        with_environment(_cfg(), {"GPUFED_LEASE_SECONDS": "3", "GPUFED_LEASE_RENEW_SECONDS": "5"})


def test_an_unknown_crash_point_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="reserved"):
        faults._parse("reserve")
    assert faults._parse("placed:3") == ("placed", 3)
    assert faults._parse("") is None
