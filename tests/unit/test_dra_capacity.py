"""Table tests: the NVIDIA DRA driver's ResourceSlice shapes (whole GPU, static MIG, partitionable GPUs)
and allocated claims -> NodeFacts -> the same ClusterSummary the device-plugin path produces.

The slices are written the way the driver publishes them in resource.k8s.io/v1 (device names
gpu-<minor> and gpu-<minor>-mig-<profile>-<giProfileId>-<placementStart>, attributes type / uuid /
productName / architecture / cudaComputeCapability / driverVersion / resource.kubernetes.io/pcieRoot /
resource.kubernetes.io/numaNode, capacity memory; MIG parentUUID / profile and the MIG capacities;
partitionable GPUs with a counter set gpu-<minor>-counter-set and consumesCounters).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from broker.capacity import dra, kube_objects, rollup
from broker.capacity.index import CapacityIndex
from broker.core.errors import MalformedObject
from broker.core.model import NodeFacts

NODE = "node-a"


def gpu(
    minor: int, product: str = "NVIDIA H100 80GB HBM3", memory: str = "81559Mi", numa: int = 0
) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-0000000{minor}-5a5e-4a1c-9b2b-0f6e9e2d1a11"},
            "productName": {"string": product},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.159.4"},
            "cudaDriverVersion": {"version": "13.0.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{minor:02x}"},
            "resource.kubernetes.io/numaNode": {"int": numa},
        },
        "capacity": {"memory": {"value": memory}},
    }


MIG_CAPS = {
    "1g.10gb": (19, 1, "9984Mi", 16),
    "2g.20gb": (14, 2, "20096Mi", 32),
    "3g.40gb": (9, 4, "40320Mi", 60),
    "7g.80gb": (0, 8, "80896Mi", 132),
}


def mig(minor: int, profile: str, start: int, counters: bool = False) -> dict[str, Any]:
    gi, slices, memory, sms = MIG_CAPS[profile]
    cap: dict[str, Any] = {
        "multiprocessors": {"value": str(sms)},
        "copyEngines": {"value": str(slices)},
        "decoders": {"value": str(slices)},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": str(slices)},
        "ofaEngines": {"value": "0"},
        "memory": {"value": memory},
    }
    dev: dict[str, Any] = {
        "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{gi}-{start}",
        "attributes": {
            "type": {"string": "mig"},
            "parentUUID": {"string": f"GPU-0000000{minor}-5a5e-4a1c-9b2b-0f6e9e2d1a11"},
            "profile": {"string": profile},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "architecture": {"string": "Hopper"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{minor:02x}"},
        },
        "capacity": cap,
    }
    if counters:
        consumed = {"memory": {"value": memory}, "multiprocessors": {"value": str(sms)}}
        consumed.update({f"memory-slice-{i}": {"value": "1"} for i in range(start, start + slices)})
        dev["consumesCounters"] = [{"counterSet": f"gpu-{minor}-counter-set", "counters": consumed}]
    else:
        for i in range(start, start + slices):
            cap[f"memorySlice{i}"] = {"value": "1"}
    return dev


def full_partitionable(minor: int) -> dict[str, Any]:
    dev = gpu(minor)
    consumed = {"memory": {"value": "81559Mi"}, "multiprocessors": {"value": "132"}}
    consumed.update({f"memory-slice-{i}": {"value": "1"} for i in range(8)})
    dev["consumesCounters"] = [{"counterSet": f"gpu-{minor}-counter-set", "counters": consumed}]
    return dev


def counter_set(minor: int) -> dict[str, Any]:
    counters = {"memory": {"value": "81559Mi"}, "multiprocessors": {"value": "132"}}
    counters.update({f"memory-slice-{i}": {"value": "1"} for i in range(8)})
    return {"name": f"gpu-{minor}-counter-set", "counters": counters}


def rslice(
    devices: list[dict[str, Any]] | None = None,
    counters: list[dict[str, Any]] | None = None,
    generation: int = 1,
    count: int = 1,
    suffix: str = "x7k2p",
    node: str = NODE,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": "gpu.nvidia.com",
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
    }
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-{suffix}"},
        "spec": spec,
    }


def claim(*devices: str, node: str = NODE) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d}
                        for d in devices
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
    }


def bare_node(gpus: int = 0) -> dict[str, Any]:
    """A DRA node: no nvidia.com/gpu resources or GFD labels (or, for the double-count case, some)."""
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    labels = {"kubernetes.io/hostname": NODE}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
        labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    return {
        "metadata": {"name": NODE, "labels": labels},
        "spec": {},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def facts(
    slices: list[dict[str, Any]],
    claims: Sequence[dict[str, Any]] = (),
    node: dict[str, Any] | None = None,
) -> NodeFacts:
    base = kube_objects.node_facts(node or bare_node(), [], None)
    return dra.merge(base, slices, dra.used_devices(claims))


def mig_rows(f: NodeFacts) -> dict[str, tuple[int, int]]:
    return {s.profile: (s.allocatable, s.free) for s in f.mig}


CASES = [
    # id, slices, claims, (gpus allocatable, gpus free, gpu_count), {profile: (allocatable, free)}
    ("whole-gpus-idle", [rslice([gpu(0), gpu(1), gpu(2), gpu(3)])], [], (4, 4, 4), {}),
    (
        "whole-gpus-two-allocated",
        [rslice([gpu(0), gpu(1), gpu(2), gpu(3)])],
        [claim("gpu-0", "gpu-2")],
        (4, 2, 4),
        {},
    ),
    (
        "static-mig-balanced",
        [
            rslice(
                [
                    mig(0, "3g.40gb", 4),
                    mig(0, "2g.20gb", 0),
                    mig(0, "1g.10gb", 2),
                    mig(0, "1g.10gb", 3),
                    gpu(1),
                ]
            )
        ],
        [claim("gpu-0-mig-1g10gb-19-2")],
        (1, 1, 2),
        {"1g.10gb": (2, 1), "2g.20gb": (1, 1), "3g.40gb": (1, 1)},
    ),
    (
        "partitionable-idle-counts-by-counters",
        [
            rslice(counters=[counter_set(0)], count=2, suffix="c0"),
            rslice(
                [full_partitionable(0)]
                + [mig(0, "1g.10gb", s, counters=True) for s in range(7)]
                + [mig(0, "3g.40gb", s, counters=True) for s in (0, 4)]
                + [mig(0, "7g.80gb", 0, counters=True)],
                count=2,
                suffix="d0",
            ),
        ],
        [],
        (1, 1, 1),
        {"1g.10gb": (7, 7), "3g.40gb": (2, 2), "7g.80gb": (1, 1)},
    ),
    (
        "partitionable-one-partition-used-blocks-the-whole-gpu",
        [
            rslice(counters=[counter_set(0)], count=2, suffix="c0"),
            rslice(
                [full_partitionable(0)]
                + [mig(0, "1g.10gb", s, counters=True) for s in range(7)]
                + [mig(0, "3g.40gb", s, counters=True) for s in (0, 4)]
                + [mig(0, "7g.80gb", 0, counters=True)],
                count=2,
                suffix="d0",
            ),
        ],
        [claim("gpu-0-mig-3g40gb-9-4")],
        (1, 0, 1),
        # slices 4-7 are taken: 1g fits at 0..3 only, one 3g left, no 7g
        {"1g.10gb": (7, 4), "3g.40gb": (2, 1), "7g.80gb": (1, 0)},
    ),
    (
        "stale-generation-ignored",
        [rslice([gpu(0), gpu(1)], generation=1, suffix="old"), rslice([gpu(0)], generation=2, suffix="new")],
        [],
        (1, 1, 1),
        {},
    ),
]


@pytest.mark.parametrize(
    ("slices", "claims", "whole", "migs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_slices_to_node_facts(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    whole: tuple[int, int, int],
    migs: dict[str, tuple[int, int]],
) -> None:
    f = facts(slices, claims)
    assert f.dra
    assert f.product is not None and f.product.name == "H100-80GB"
    assert (f.gpus_allocatable, f.gpus_free, f.gpu_count) == whole
    assert mig_rows(f) == migs


def test_summary_counts_dra_and_device_plugin_nodes_of_one_cluster_once() -> None:
    """One DRA node (4 GPUs, 1 allocated) and one device-plugin node (8 GPUs, none used) of H100."""
    index = CapacityIndex("mixed")
    index.upsert(facts([rslice([gpu(i) for i in range(4)])], [claim("gpu-1")]))
    plugin = bare_node(gpus=8)
    plugin["metadata"] = {"name": "node-b", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    index.upsert(kube_objects.node_facts(plugin, [], None))
    summary = index.summary(traits=_traits(), health=_healthy(), heartbeat=1.0)
    h100 = summary.product("H100-80GB")
    assert h100 is not None
    # every GPU once: both kinds summed, each kept on its own, as a Job asks one way and is fitted to
    # one kind (tests/unit/test_claim_kind_per_job.py)
    assert (h100.total, h100.allocatable, h100.allocated, h100.free) == (12, 12, 1, 11)
    assert (h100.offered, h100.nodes_by_free) == ("both", (0, 0, 0, 1, 0, 0, 0, 0, 1))
    assert [(k.dra, k.allocatable, k.free, k.nodes_by_free) for k in h100.kinds] == [
        (False, 8, 8, (0, 0, 0, 0, 0, 0, 0, 0, 1)),
        (True, 4, 3, (0, 0, 0, 1)),
    ]


def test_node_with_slices_and_device_plugin_resources_is_read_from_dra_only() -> None:
    f = facts([rslice([gpu(0), gpu(1)])], [], node=bare_node(gpus=2))
    assert (f.gpus_allocatable, f.gpu_count) == (2, 2)


def test_numa_zones_from_numa_node_attribute() -> None:
    f = facts([rslice([gpu(0, numa=0), gpu(1, numa=0), gpu(2, numa=1), gpu(3, numa=1)])], [claim("gpu-0")])
    assert {(z.name, z.gpus_allocatable, z.gpus_available) for z in f.numa_zones} == {
        ("numa-0", 2, 1),
        ("numa-1", 2, 2),
    }
    assert rollup.numa_block(f) == 2


def test_numa_zones_fall_back_to_the_pcie_root_when_no_numa_node_is_published() -> None:
    """A driver that publishes only resource.kubernetes.io/pcieRoot: the GPUs under one root are a zone."""
    devices = [gpu(i) for i in range(4)]
    for i, d in enumerate(devices):
        del d["attributes"]["resource.kubernetes.io/numaNode"]
        d["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": f"pci0000:{i // 2:02x}"}
    f = facts([rslice(devices)], [claim("gpu-3")])
    assert {(z.name, z.gpus_allocatable, z.gpus_available) for z in f.numa_zones} == {
        ("pci0000:00", 2, 2),
        ("pci0000:01", 2, 1),
    }
    assert rollup.numa_block(f) == 2


def test_dra_mig_resource_is_the_device_class() -> None:
    f = facts([rslice([mig(0, "1g.10gb", 0)])])
    assert rollup.mig_resource_name(f, "1g.10gb") == "mig.nvidia.com"


def test_slices_of_other_drivers_and_nodes_without_slices_are_untouched() -> None:
    other = rslice([gpu(0)])
    other["spec"]["driver"] = "gpu.example.com"
    base = kube_objects.node_facts(bare_node(gpus=8), [], None)
    assert dra.merge(base, [other], frozenset()) == base


def test_malformed_slice_names_the_field() -> None:
    bad = rslice([gpu(0)])
    bad["spec"]["devices"][0]["capacity"]["memory"] = {"value": "lots"}
    with pytest.raises(MalformedObject, match=r"spec.devices\[0\].capacity.memory"):
        facts([bad])


def _traits() -> Any:
    from broker.core.model import ClusterTraits

    return ClusterTraits(name="mixed")


def _healthy() -> Any:
    from broker.core.model import Health

    return Health.HEALTHY
