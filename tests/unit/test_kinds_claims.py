"""DRA claims inside the workload kinds (issue 47): a role's pod template may ask for its GPUs through
its own claim (`resourceClaims` by `resourceClaimTemplateName`, used by a container, and the pod
template's `gpufed.io/claim-gpus`); the demand counts them like nvidia.com/gpu limits. Level 2 writes
the kind the placement chose: on DRA capacity one ResourceClaimTemplate per GPU role (the object owns
them once created), on the device plugin `nvidia.com/gpu` limits, the user's claim reference replaced
either way. Refusals name the field. Table tests, pure."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.errors import InvalidRequest
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.intake.parse import spec_of
from broker.workload.kinds import registry
from broker.workload.kinds.member import build_workload_any
from tests.unit.kind_objects import edited, jobset, pytorchjob, rayjob

CLAIM = {"name": "gpu", "resourceClaimTemplateName": "two-h100"}


def with_claim(template: dict[str, Any], gpus: int = 2, container: int = 0) -> None:
    """The template asks for `gpus` GPUs per pod through its own claim instead of nvidia.com/gpu."""
    template.setdefault("metadata", {}).setdefault("annotations", {})["gpufed.io/claim-gpus"] = str(gpus)
    spec = template["spec"]
    spec["resourceClaims"] = [dict(CLAIM)]
    resources = spec["containers"][container].setdefault("resources", {})
    resources.get("limits", {}).pop("nvidia.com/gpu", None)
    resources["claims"] = [{"name": "gpu"}]


def claimed_jobset() -> dict[str, Any]:
    js = jobset(leader_gpus=None, workers=2)
    with_claim(js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"])
    return js


def claimed_rayjob() -> dict[str, Any]:
    rj = rayjob(workers=2)
    with_claim(rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])
    return rj


def claimed_pytorchjob() -> dict[str, Any]:
    pj = pytorchjob(workers=1)
    for role in ("Master", "Worker"):
        with_claim(pj["spec"]["pytorchReplicaSpecs"][role]["template"])
    return pj


def request_of(obj: dict[str, Any]) -> JobRequest:
    return registry.with_workload(obj, spec_of(obj).to_request())


def placement(pods: int, dra: bool) -> Placement:
    return Placement(
        cluster="c",
        product="H100-80GB",
        resource_name="nvidia.com/gpu",
        units_per_pod=2,
        pods=pods,
        score=50,
        gfd_products=("NVIDIA H100 80GB HBM3",) if dra else ("NVIDIA-H100-80GB-HBM3",),
        dra=dra,
    )


DEMAND = [
    # id, object, GPU pods, GPUs per pod
    ("jobset-workers", claimed_jobset(), 2, 2),
    ("rayjob-workers", claimed_rayjob(), 2, 2),
    ("pytorchjob-every-role", claimed_pytorchjob(), 2, 2),
]


@pytest.mark.parametrize(("obj", "pods", "gpus"), [c[1:] for c in DEMAND], ids=[c[0] for c in DEMAND])
def test_claimed_gpus_count_in_the_demand_like_gpu_limits(obj: dict[str, Any], pods: int, gpus: int) -> None:
    spec = spec_of(obj)
    assert (spec.pods, spec.gpus) == (pods, gpus)


def _pods(member: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if member["kind"] == "JobSet":
        return {
            r["name"]: r["template"]["spec"]["template"]["spec"] for r in member["spec"]["replicatedJobs"]
        }
    if member["kind"] == "RayJob":
        cluster = member["spec"]["rayClusterSpec"]
        out = {"head": cluster["headGroupSpec"]["template"]["spec"]}
        out.update({g["groupName"]: g["template"]["spec"] for g in cluster["workerGroupSpecs"]})
        return out
    return {k.lower(): v["template"]["spec"] for k, v in member["spec"]["pytorchReplicaSpecs"].items()}


@pytest.mark.parametrize(("obj", "pods", "gpus"), [c[1:] for c in DEMAND], ids=[c[0] for c in DEMAND])
def test_on_dra_capacity_each_gpu_role_claims_through_its_own_template(
    obj: dict[str, Any], pods: int, gpus: int
) -> None:
    built = build_workload_any("K1", 1, request_of(obj), placement(pods, dra=True), ClusterTraits("c"))
    templates = {t["metadata"]["name"]: t for t in built.companions if t["kind"] == "ResourceClaimTemplate"}
    gpu_roles = {role: pod for role, pod in _pods(built.job).items() if pod.get("resourceClaims")}
    assert gpu_roles and len(templates) == len(gpu_roles)  # one per GPU role, none shared, none left over
    for role, pod in gpu_roles.items():
        (claim,) = pod["resourceClaims"]
        assert claim["name"] == "gpus" and claim["resourceClaimTemplateName"] in templates
        template = templates[claim["resourceClaimTemplateName"]]
        assert template["metadata"]["labels"]["gpufed.io/role"].lower() == role
        request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert (request["deviceClassName"], request["count"]) == ("gpu.nvidia.com", gpus)
        main = pod["containers"][0]["resources"]
        assert main["claims"] == [{"name": "gpus"}] and "nvidia.com/gpu" not in main.get("limits", {})
        assert "two-h100" not in str(pod)  # the user's reference replaced by the member's own template


@pytest.mark.parametrize(("obj", "pods", "gpus"), [c[1:] for c in DEMAND], ids=[c[0] for c in DEMAND])
def test_on_the_device_plugin_the_claim_becomes_gpu_limits(obj: dict[str, Any], pods: int, gpus: int) -> None:
    built = build_workload_any("K1", 1, request_of(obj), placement(pods, dra=False), ClusterTraits("c"))
    assert not [t for t in built.companions if t["kind"] == "ResourceClaimTemplate"]
    limited = 0
    for pod in _pods(built.job).values():
        assert "resourceClaims" not in pod
        resources = pod["containers"][0].get("resources", {})
        assert "claims" not in resources
        limited += resources.get("limits", {}).get("nvidia.com/gpu") == str(gpus)
    assert limited >= 1


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    return edited(obj, path, value)


WORKERS = "spec.replicatedJobs.1.template.spec.template"
AT = "spec.replicatedJobs[1].template.spec.template"
REFUSED = [
    (
        _set(claimed_jobset(), f"{WORKERS}.spec.resourceClaims", [{"name": "gpu", "resourceClaimName": "x"}]),
        f"{AT}.spec.resourceClaims[0].resourceClaimName",
        "shared ResourceClaim",
    ),
    (
        _set(claimed_jobset(), f"{WORKERS}.metadata.annotations", {}),
        f"{AT}.metadata.annotations[gpufed.io/claim-gpus]",
        "required",
    ),
    (
        _set(claimed_jobset(), f"{WORKERS}.metadata.annotations", {"gpufed.io/claim-gpus": "0"}),
        f"{AT}.metadata.annotations[gpufed.io/claim-gpus]",
        "from 1 to 64",
    ),
    (
        _set(claimed_jobset(), f"{WORKERS}.spec.resourceClaims", [CLAIM, {**CLAIM, "name": "nic"}]),
        f"{AT}.spec.resourceClaims[1]",
        "one claim per pod",
    ),
    (
        _set(claimed_jobset(), f"{WORKERS}.spec.containers.0.resources.claims", [{"name": "other"}]),
        f"{AT}.spec.containers[0].resources.claims[0].name",
        "not a claim of the pod",
    ),
    (
        _set(claimed_jobset(), f"{WORKERS}.spec.containers.0.resources.claims", []),
        f"{AT}.spec.resourceClaims[0]",
        "no container uses",
    ),
    (
        _set(claimed_jobset(), f"{WORKERS}.spec.containers.0.resources.limits", {"nvidia.com/gpu": 1}),
        f"{AT}.spec.containers[0].resources.limits[nvidia.com/gpu]",
        "not both",
    ),
]


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    REFUSED,
    ids=[
        "shared-claim",
        "no-count",
        "zero-count",
        "two-claims",
        "unknown-claim",
        "unused-claim",
        "claim-and-limit",
    ],
)
def test_a_claim_the_broker_cannot_follow_is_refused_naming_the_field(
    obj: dict[str, Any], field: str, words: str
) -> None:
    adapter = registry.kind_of(obj)
    assert adapter is not None
    with pytest.raises(InvalidRequest) as e:
        adapter.demand(obj)
    assert e.value.field == field and words in e.value.detail
