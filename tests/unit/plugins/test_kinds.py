"""workload-kind: a JobSet, RayJob, PyTorchJob or TrainJob goes only to members that serve its API (and
hold the TrainJob's ClusterTrainingRuntime); members not read yet wait; plain Jobs skip the plugin."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from broker.core.model import JobRequest
from broker.intake.parse import spec_of
from broker.scheduler.placement import PlacementPolicy, place
from broker.scheduler.plugins.kinds import WorkloadKindServed
from broker.workload.kinds import registry
from tests.unit.k8s_builders import summary
from tests.unit.kind_objects import jobset, pytorchjob, rayjob, trainjob
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, prepared

JS, RAY, PT, TRAIN = (
    "jobset.x-k8s.io/v1alpha2",
    "ray.io/v1",
    "kubeflow.org/v1",
    "trainer.kubeflow.org/v1alpha1",
)


def request(obj: dict[str, Any]) -> JobRequest:
    return registry.with_workload(obj, spec_of(obj).to_request())


def member(apis: tuple[str, ...] = (), runtimes: tuple[str, ...] = (), observed: bool = True) -> Any:
    return replace(
        summary("a", h100(8, 8)),
        workload_apis=apis,
        training_runtimes=runtimes,
        workload_apis_observed=observed,
    )


NO = "UNSCHEDULABLE_AND_UNRESOLVABLE"


@pytest.mark.parametrize(
    ("obj", "apis", "runtimes", "observed", "expected"),
    [
        (jobset(), (JS,), (), True, UNCHANGED),
        (jobset(), (RAY,), (), True, (NO, f"no {JS}", None)),
        (jobset(), (), (), False, ("UNSCHEDULABLE", f"its APIs are not read yet (for {JS})", None)),
        (rayjob(), (JS, RAY), (), True, UNCHANGED),
        (rayjob(), (JS,), (), True, (NO, f"no {RAY}", None)),
        (pytorchjob(), (PT,), (), True, UNCHANGED),
        (pytorchjob(), (), (), True, (NO, f"no {PT}", None)),
        (trainjob(), (JS, TRAIN), ("torch-distributed",), True, UNCHANGED),
        (
            trainjob(),
            (JS, TRAIN),
            ("other",),
            True,
            (NO, "no ClusterTrainingRuntime torch-distributed", None),
        ),
        (trainjob(), (JS,), ("torch-distributed",), True, (NO, f"no {TRAIN}", None)),
    ],
)
def test_member_offered_only_when_it_serves_the_kind(
    obj: dict[str, Any], apis: tuple[str, ...], runtimes: tuple[str, ...], observed: bool, expected: object
) -> None:
    assert filter_outcome(WorkloadKindServed(), request(obj), member(apis, runtimes, observed)) == expected


def test_plain_jobs_skip_it_and_the_verdict_names_the_missing_api() -> None:
    assert WorkloadKindServed().applies(prepared(JobRequest("j", gpus_per_pod=1))) is False
    verdict = place(request(jobset()), [member((RAY,))], {}, PlacementPolicy(), now=1000.0)
    assert "no jobset.x-k8s.io/v1alpha2" in str(verdict)
