"""kubesim DRA: what the driver publishes for DRA pools, API validation, the CEL subset, and the
resourceclaim controller + scheduler plugin allocating and releasing devices."""

from __future__ import annotations

from typing import Any

import pytest

from kubesim.cel import CelError, DeviceView, Version, compile_selector
from kubesim.dra import CLAIMS, SLICES, TEMPLATES, validate
from kubesim.fleet import FleetError, parse_fleet
from kubesim.store import Obj
from tests.unit.kubesim.world import World, bare_pod, pod_condition, scheduled, world

H100 = {"product": "H100-80GB", "count": 2, "allocation": "dra"}


def dra_world(*pools: dict[str, Any]) -> World:
    return world({"name": "d", "nodePools": list(pools)})


def pool(name: str, gpu: dict[str, Any], count: int = 1) -> dict[str, Any]:
    return {"name": name, "count": count, "cpu": "64", "memory": "512Gi", "gpu": gpu}


def template(name: str, device_class: str, count: int = 1, *selectors: str) -> Obj:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}},
    }


def claiming_pod(name: str, tmpl: str, duration: float = 100) -> Obj:
    pod = bare_pod(
        name, duration=duration, resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": tmpl}]
    )
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return pod


def claim_of(w: World, pod: str) -> Obj:
    status = w.pod(pod)["status"]["resourceClaimStatuses"][0]
    return w.store.get(CLAIMS, "default", status["resourceClaimName"])


def devices(claim: Obj) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def test_a_dra_node_has_slices_not_gpu_resources() -> None:
    w = dra_world(pool("h100", H100))
    node = w.store.get("nodes", "", "d-h100-0")
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert not any(k.startswith("nvidia.com/") for k in node["metadata"]["labels"])
    (rs,) = w.store.list(SLICES)[0]
    assert rs["spec"]["driver"] == "gpu.nvidia.com" and rs["spec"]["nodeName"] == "d-h100-0"
    assert rs["spec"]["pool"] == {"name": "d-h100-0", "generation": 1, "resourceSliceCount": 1}
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Node"
    gpu0 = rs["spec"]["devices"][0]
    assert gpu0["name"] == "gpu-0"
    assert gpu0["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert gpu0["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu0["capacity"]["memory"] == {"value": "81559Mi"}
    classes = {c["metadata"]["name"] for c in w.store.list("deviceclasses.resource.k8s.io")[0]}
    assert classes == {"gpu.nvidia.com", "mig.nvidia.com"}


def test_partitionable_gpus_publish_counters_in_a_slice_of_their_own() -> None:
    w = dra_world(
        pool("h200", {"product": "H200-141GB", "count": 1, "allocation": "dra", "partitionable": True})
    )
    slices = w.store.list(SLICES)[0]
    counters = [s for s in slices if s["spec"].get("sharedCounters")]
    with_devices = [s for s in slices if s["spec"].get("devices")]
    assert len(counters) == 1 and not counters[0]["spec"].get("devices")
    cs = counters[0]["spec"]["sharedCounters"][0]
    assert cs["name"] == "gpu-0-counter-set"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(cs["counters"])
    names = [d["name"] for s in with_devices for d in s["spec"]["devices"]]
    assert "gpu-0" in names and "gpu-0-mig-1g18gb-19-6" in names and "gpu-0-mig-7g141gb-0-0" in names
    assert all(len(s["spec"]["devices"]) <= 64 for s in with_devices)


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ({"product": "H100-80GB", "partitionable": True}, "partitionable: only with allocation dra"),
        ({"product": "L4", "allocation": "dra", "partitionable": True}, "MIG-capable"),
        ({"product": "H100-80GB", "allocation": "dra", "sharing": {"replicas": 2}}, "sharing"),
    ],
)
def test_bad_dra_pools_name_the_field(gpu: dict[str, Any], message: str) -> None:
    with pytest.raises(FleetError, match=message):
        parse_fleet({"clusters": [{"name": "d", "region": "r", "nodePools": [pool("p", gpu)]}]}, "test")


def test_claims_are_validated_like_the_api_server() -> None:
    bad = template("t", "")
    bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    bad["spec"]["spec"]["devices"]["requests"].append({"name": "gpus", "exactly": {"deviceClassName": "x"}})
    fields = dict(validate("ResourceClaimTemplate", bad))
    assert fields["spec.spec.devices.requests[0].exactly.deviceClassName"] == "Required value"
    assert "greater than zero" in fields["spec.spec.devices.requests[0].exactly.count"]
    assert fields["spec.spec.devices.requests[1].name"].startswith("Duplicate value")
    wrong_cel = template("t", "gpu.nvidia.com", 1, "device.attributes['gpu.nvidia.com'].x.startsWith('a')")
    (field, msg), *_ = validate("ResourceClaimTemplate", wrong_cel)
    assert field.endswith("selectors[0].cel.expression") and "compilation failed" in msg
    rs = {
        "spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "resourceSliceCount": 1}, "devices": [{}]}
    }
    assert dict(validate("ResourceSlice", rs))["spec.devices[0].name"] == "Required value"


def view(**attrs: Any) -> DeviceView:
    return DeviceView(
        driver="gpu.nvidia.com",
        attributes={"gpu.nvidia.com": attrs, "resource.kubernetes.io": {"numaNode": 1}},
        capacity={"gpu.nvidia.com": {"memory": 80 * 2.0**30}},
    )


@pytest.mark.parametrize(
    ("expr", "matches"),
    [
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
        ("device.attributes['gpu.nvidia.com'].productName in ['NVIDIA H200', 'NVIDIA H100 80GB HBM3']", True),
        ('device.attributes["gpu.nvidia.com"]["profile"] == "1g.10gb"', False),  # no such attribute: no match
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('9.0.0')) >= 0", True),
        ("device.attributes['resource.kubernetes.io'].numaNode == 1 || false", True),
        ("!(device.attributes['gpu.nvidia.com'].type == 'mig')", True),
    ],
)
def test_cel_subset(expr: str, matches: bool) -> None:
    device = view(type="gpu", productName="NVIDIA H100 80GB HBM3", cudaComputeCapability=Version((9, 0, 0)))
    assert compile_selector(expr).matches(device) is matches


def test_cel_outside_the_subset_is_refused() -> None:
    with pytest.raises(CelError, match="unsupported"):
        compile_selector("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')")


def test_claims_are_allocated_exactly_and_released_when_the_pod_ends() -> None:
    w = dra_world(pool("h100", H100))
    w.store.create(TEMPLATES, template("one", "gpu.nvidia.com", 1))
    for name in ("a", "b", "c"):
        w.store.create("pods", claiming_pod(name, "one", duration=100 if name != "a" else 10))
    w.settle()
    assert scheduled(w.pod("a")) and scheduled(w.pod("b")) and not scheduled(w.pod("c"))
    assert sorted(devices(claim_of(w, "a")) + devices(claim_of(w, "b"))) == ["gpu-0", "gpu-1"]
    cond = pod_condition(w.pod("c"), "PodScheduled")
    assert cond["reason"] == "Unschedulable" and "cannot allocate all claims" in cond["message"]
    claim = claim_of(w, "a")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert claim["status"]["reservedFor"][0]["name"] == "a"
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == ["d-h100-0"]
    w.advance(20)  # a ends: its generated claim goes and c gets the GPU
    assert w.pod("a")["status"]["phase"] == "Succeeded"
    assert w.store.find(CLAIMS, "default", claim["metadata"]["name"]) is None
    assert scheduled(w.pod("c")) and devices(claim_of(w, "c")) == devices(claim)


def test_partitions_share_counters_so_a_used_partition_blocks_the_full_gpu() -> None:
    w = dra_world(
        pool("h200", {"product": "H200-141GB", "count": 1, "allocation": "dra", "partitionable": True})
    )
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    w.store.create(TEMPLATES, template("p3", "mig.nvidia.com", 1, profile.format("3g.71gb")))
    w.store.create(TEMPLATES, template("p7", "mig.nvidia.com", 1, profile.format("7g.141gb")))
    w.store.create(TEMPLATES, template("whole", "gpu.nvidia.com", 1))
    w.store.create("pods", claiming_pod("three", "p3"))
    w.settle()
    assert devices(claim_of(w, "three")) == ["gpu-0-mig-3g71gb-9-0"]
    w.store.create("pods", claiming_pod("seven", "p7"))
    w.store.create("pods", claiming_pod("full", "whole"))
    w.store.create("pods", claiming_pod("three-b", "p3"))
    w.settle()
    assert not scheduled(w.pod("seven")) and not scheduled(w.pod("full"))
    assert devices(claim_of(w, "three-b")) == ["gpu-0-mig-3g71gb-9-4"]


def test_a_shared_claim_is_deallocated_when_its_last_pod_ends() -> None:
    w = dra_world(pool("h100", H100))
    w.store.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": "default"},
            "spec": template("x", "gpu.nvidia.com", 2)["spec"]["spec"],
        },
    )
    for name, duration in (("p1", 10.0), ("p2", 20.0)):
        pod = bare_pod(
            name, duration=duration, resourceClaims=[{"name": "gpus", "resourceClaimName": "shared"}]
        )
        w.store.create("pods", pod)
    w.settle()
    shared = w.store.get(CLAIMS, "default", "shared")
    assert len(shared["status"]["reservedFor"]) == 2 and len(devices(shared)) == 2
    w.advance(15)
    assert [r["name"] for r in w.store.get(CLAIMS, "default", "shared")["status"]["reservedFor"]] == ["p2"]
    w.advance(10)
    assert "allocation" not in w.store.get(CLAIMS, "default", "shared")["status"]


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    w = dra_world(pool("h100", H100))
    tmpl = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "either", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "firstAvailable": [
                                {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4},
                                {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
                            ],
                        }
                    ]
                }
            }
        },
    }
    assert validate("ResourceClaimTemplate", tmpl) == []
    w.store.create(TEMPLATES, tmpl)
    w.store.create("pods", claiming_pod("p", "either"))
    w.settle()
    results = claim_of(w, "p")["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in results] == ["gpus/two", "gpus/two"]


def test_resourceslices_select_by_node_and_driver_as_the_kubelet_does() -> None:
    from kubesim.selectors import SelectorError, fields_match, parse_field_selector

    w = dra_world(pool("h100", H100, count=2))
    reqs = parse_field_selector("spec.nodeName=d-h100-1,spec.driver=gpu.nvidia.com", SLICES)
    assert [s["spec"]["nodeName"] for s in w.store.list(SLICES)[0] if fields_match(reqs, s)] == ["d-h100-1"]
    with pytest.raises(SelectorError, match="field label not supported"):
        parse_field_selector("spec.pool.name=x", SLICES)


def test_pod_claims_are_validated_like_the_api_server() -> None:
    from kubesim.dra import validate_pod_claims

    spec = {
        "resourceClaims": [
            {"name": "gpus"},
            {"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
        ],
        "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
    }
    causes = dict(validate_pod_claims(spec, "spec"))
    assert "must specify one of" in causes["spec.resourceClaims[0]"]
    assert causes["spec.resourceClaims[1].name"] == 'Duplicate value: "gpus"'
    assert "at most one of" in causes["spec.resourceClaims[1]"]
    assert causes["spec.containers[0].resources.claims[0]"] == (
        'Not found: "gpu": must be one of the names in pod.spec.resourceClaims: gpus'
    )
    assert validate_pod_claims({"containers": [{"name": "c"}]}, "spec") == []
