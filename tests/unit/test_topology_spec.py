"""The job's NVLink wish at the edge: the native `topology` field and the plain Job's annotation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from broker.core.k8s_names import REQUEST_ANNOTATION
from broker.core.model import JobRequest
from broker.core.topology import NvlinkClique
from broker.intake.job_spec import JobSpec
from broker.workload import k8s_job
from broker.workload.manifest import decode_request, recovery_annotations


def test_native_spec_takes_nvlink_clique() -> None:
    spec = JobSpec.model_validate(
        {"name": "t", "gpus": 4, "pods": 8, "topology": {"nvlinkClique": "required"}}
    )
    assert spec.to_request().nvlink_clique is NvlinkClique.REQUIRED
    assert JobSpec.model_validate({"name": "t", "gpus": 4}).to_request().nvlink_clique is NvlinkClique.NONE


@pytest.mark.parametrize(
    "body",
    [
        {"name": "t", "gpus": 4, "topology": {"nvlinkClique": "sometimes"}},
        {"name": "t", "mig": {"profile": "1g.10gb"}, "topology": {"nvlinkClique": "required"}},
    ],
)
def test_bad_topology_is_refused_naming_the_field(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as err:
        JobSpec.model_validate(body)
    assert "nvlinkClique" in str(err.value)


def _job(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "annotations": annotations},
        "spec": {
            "parallelism": 8,
            "completions": 8,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
                    ],
                }
            },
        },
    }


def test_plain_job_annotation_sets_the_wish() -> None:
    native = k8s_job.to_native(_job({"gpufed.io/nvlink-clique": "preferred"}))
    assert JobSpec.model_validate(native).to_request().nvlink_clique is NvlinkClique.PREFERRED


def test_a_bad_annotation_value_names_the_annotation() -> None:
    native = k8s_job.to_native(_job({"gpufed.io/nvlink-clique": "always"}))
    with pytest.raises(ValidationError) as err:
        JobSpec.model_validate(native)
    loc = err.value.errors()[0]["loc"]
    assert (
        k8s_job.job_field([str(p) for p in loc])
        == "metadata.annotations[gpufed.io/nvlink-clique].nvlinkClique"
    )


def test_the_wish_survives_a_rebuild_from_the_member_job() -> None:
    """Failover and recovery place the job again from its request: the clique requirement is kept in
    the Job's request annotation (rebuilt after a Redis loss) as in the record."""
    request = JobRequest("train", gpus_per_pod=4, pods=8, nvlink_clique=NvlinkClique.REQUIRED)
    annotations = recovery_annotations(request, 1000.0, None, None)
    assert decode_request(annotations[REQUEST_ANNOTATION]).nvlink_clique is NvlinkClique.REQUIRED
