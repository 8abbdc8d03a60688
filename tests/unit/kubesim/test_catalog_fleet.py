"""The fleet file and the catalog produce nodes that look like GFD/GPU-operator labelled nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubesim.catalog import CATALOG, gpu_model, mig_layout
from kubesim.clock import SimClock
from kubesim.fleet import FleetError, builtin_fleet, load_fleet, parse_fleet, populate, synthetic_fleet
from kubesim.store import ObjectStore
from tests.unit.kubesim.world import pool, world

NRT = "noderesourcetopologies.topology.node.k8s.io"


def labels_of(w_nodes: list[dict[str, Any]], name: str) -> dict[str, str]:
    labels: dict[str, str] = next(n for n in w_nodes if n["metadata"]["name"] == name)["metadata"]["labels"]
    return labels


@pytest.mark.parametrize(
    ("product", "gfd_product", "memory", "family", "major", "minor", "mig"),
    [
        ("A100-40GB", "NVIDIA-A100-SXM4-40GB", "40960", "ampere", "8", "0", "true"),
        ("A100-80GB", "NVIDIA-A100-SXM4-80GB", "81920", "ampere", "8", "0", "true"),
        ("H100-80GB", "NVIDIA-H100-80GB-HBM3", "81559", "hopper", "9", "0", "true"),
        ("H200-141GB", "NVIDIA-H200", "143771", "hopper", "9", "0", "true"),
        ("L4", "NVIDIA-L4", "23034", "ada-lovelace", "8", "9", "false"),
    ],
)
def test_whole_gpu_nodes_carry_the_real_gfd_labels(
    product: str, gfd_product: str, memory: str, family: str, major: str, minor: str, mig: str
) -> None:
    w = world({"name": "c", "zone": "eu-west-1b", "nodePools": [pool("p", 1, product)]})
    node = w.store.get("nodes", "", "c-p-0")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == gfd_product
    assert labels["nvidia.com/gpu.memory"] == memory
    assert labels["nvidia.com/gpu.family"] == family
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (major, minor)
    assert labels["nvidia.com/mig.capable"] == mig
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.159.04"
    assert labels["topology.kubernetes.io/region"] == "eu-west"
    assert labels["topology.kubernetes.io/zone"] == "eu-west-1b"
    assert all(isinstance(v, str) for v in labels.values())
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.")
    assert {a["type"] for a in node["status"]["addresses"]} == {"InternalIP", "Hostname"}


def test_mig_mixed_all_balanced_exposes_per_profile_resources_and_labels() -> None:
    w = world({"name": "c", "nodePools": [pool("mig", 1, "H100-80GB", gpu={"mig": {"strategy": "mixed"}})]})
    node = w.store.get("nodes", "", "c-mig-0")
    labels, alloc = node["metadata"]["labels"], node["status"]["allocatable"]
    assert alloc["nvidia.com/mig-1g.10gb"] == "16"
    assert alloc["nvidia.com/mig-2g.20gb"] == "8"
    assert alloc["nvidia.com/mig-3g.40gb"] == "8"
    assert "nvidia.com/gpu" not in alloc
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.config"] == "all-balanced"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "16"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"


def test_mig_single_overrides_product_and_count() -> None:
    w = world(
        {
            "name": "c",
            "nodePools": [
                pool("mig", 1, "A100-40GB", gpu={"mig": {"strategy": "single", "config": "all-1g.5gb"}})
            ],
        }
    )
    node = w.store.get("nodes", "", "c-mig-0")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert labels["nvidia.com/gpu.count"] == "56"
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "56"


def test_media_extension_profile_uses_dot_me_in_names() -> None:
    w = world(
        {
            "name": "c",
            "nodePools": [
                pool("mig", 1, "H200-141GB", gpu={"mig": {"strategy": "mixed", "config": "all-1g.18gb+me"}})
            ],
        }
    )
    node = w.store.get("nodes", "", "c-mig-0")
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.18gb.me"] == "8"
    assert node["metadata"]["labels"]["nvidia.com/mig-1g.18gb.me.memory"] == "16384"


def test_time_slicing_multiplies_gpus_and_marks_the_product_shared() -> None:
    w = world(
        {
            "name": "c",
            "nodePools": [pool("ts", 1, "L4", gpu={"sharing": {"strategy": "time-slicing", "replicas": 4}})],
        }
    )
    node = w.store.get("nodes", "", "c-ts-0")
    labels = node["metadata"]["labels"]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "32"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "8"


def test_numa_pools_get_one_topology_object_per_node_with_gpus_split_across_zones() -> None:
    w = world(
        {
            "name": "c",
            "nodePools": [
                pool("h", 2, numa={"zones": 2, "policy": "single-numa-node", "scope": "pod"}),
                pool("plain", 1),
            ],
        }
    )
    assert w.store.count(NRT) == 2
    nrt = w.store.get(NRT, "", "c-h-0")
    attrs = {a["name"]: a["value"] for a in nrt["attributes"]}
    assert attrs["topologyManagerPolicy"] == "single-numa-node"
    assert attrs["topologyManagerScope"] == "pod"
    assert nrt["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    gpus = [{r["name"]: r["available"] for r in z["resources"]}["nvidia.com/gpu"] for z in nrt["zones"]]
    assert gpus == ["4", "4"]
    assert [z["name"] for z in nrt["zones"]] == ["node-0", "node-1"]


def test_h200_profiles_match_the_real_host() -> None:
    h200 = gpu_model("NVIDIA-H200")
    assert [(p.name, p.max_per_gpu) for p in h200.mig_profiles] == [
        ("1g.18gb", 7),
        ("1g.18gb+me", 1),
        ("1g.35gb", 4),
        ("2g.35gb", 3),
        ("3g.71gb", 2),
        ("4g.71gb", 1),
        ("7g.141gb", 1),
    ]
    assert {p.name: n for p, n in mig_layout(h200, "all-balanced").items()} == {
        "1g.18gb": 2,
        "2g.35gb": 1,
        "3g.71gb": 1,
    }
    assert not CATALOG["L4"].mig_capable


def test_builtin_fleets_load_and_populate() -> None:
    demo = load_fleet(builtin_fleet("demo"))
    assert [c.name for c in demo.clusters] == ["onprem-a", "onprem-b", "cloud-burst"]
    assert [c.tier for c in demo.clusters] == ["on-prem", "on-prem", "cloud"]
    clock = SimClock(speed=0, start=1_800_000_000)
    store = ObjectStore(clock.now)
    populate(store, demo.cluster("onprem-b"), clock)
    assert store.count("nodes") == 3  # two single-numa-node H100 nodes and one whole-node H100
    assert store.get("localqueues.kueue.x-k8s.io", "default", "gpu")["spec"]["clusterQueue"] == "gpu"
    assert {n["metadata"]["name"] for n in store.list("namespaces")[0]} >= {
        "default",
        "kube-system",
        "kueue-system",
    }
    small = load_fleet(builtin_fleet("small"))
    assert len(small.clusters) == 2


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        (
            {"name": "bad", "region": "r", "nodePools": [{"name": "p", "gpu": {"product": "H101"}}]},
            "cluster 'bad': clusters[0].nodePools[0].gpu.product: unknown GPU product 'H101'",
        ),
        (
            {
                "name": "l4",
                "region": "r",
                "nodePools": [{"name": "p", "gpu": {"product": "L4", "mig": {"strategy": "mixed"}}}],
            },
            "L4 is not MIG capable",
        ),
        (
            {
                "name": "s",
                "region": "r",
                "nodePools": [
                    {
                        "name": "p",
                        "gpu": {
                            "product": "A100-80GB",
                            "mig": {"strategy": "single", "config": "all-balanced"},
                        },
                    }
                ],
            },
            "single strategy needs one profile",
        ),
        (
            {"name": "q", "region": "r", "nodePools": [{"name": "p", "cpu": "lots"}]},
            "clusters[0].nodePools[0].cpu",
        ),
        (
            {"name": "k", "region": "r", "kueue": {"localQueues": [{"name": "x", "clusterQueue": "nope"}]}},
            "unknown clusterQueue 'nope'",
        ),
    ],
)
def test_bad_fleet_files_name_the_file_cluster_and_field(
    cluster: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    import yaml

    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"clusters": [cluster]}))
    with pytest.raises(FleetError) as info:
        load_fleet(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_parse_rejects_duplicate_clusters() -> None:
    with pytest.raises(FleetError, match="cluster names must be unique: a"):
        parse_fleet({"clusters": [{"name": "a", "region": "r"}, {"name": "a", "region": "r"}]})


def test_synthetic_fleet_populates_many_nodes() -> None:
    fleet = synthetic_fleet(clusters=3, nodes_per_cluster=50, gpus_per_node=4)
    clock = SimClock(speed=0)
    for c in fleet.clusters:
        store = ObjectStore(clock.now)
        populate(store, c, clock)
        assert store.count("nodes") == 50
        assert store.count(NRT) == 50
    assert len({c.name for c in fleet.clusters}) == 3
