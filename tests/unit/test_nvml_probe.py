"""The node probe on a real H200's `nvidia-smi -q -x` capture, and on this GPU-less machine through NVML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adapters.nvml import ProbeResult, probe, render
from broker.core.errors import MalformedObject
from broker.core.model import MigStrategy

REPO = Path(__file__).resolve().parents[2]
SHARED_XML = REPO.parent / "shared" / "fixtures" / "gpu-host-h200" / "nvidia-smi-q.xml"
REPO_XML = REPO / "tests" / "fixtures" / "gpu-host-h200" / "nvidia-smi-q.xml"
H200_PROFILES = [
    ("1g.18gb", 7),
    ("1g.18gb+me", 1),
    ("1g.35gb", 4),
    ("2g.35gb", 3),
    ("3g.71gb", 2),
    ("4g.71gb", 1),
    ("7g.141gb", 1),
]


@pytest.fixture(params=["shared", "repo"])
def h200(request: pytest.FixtureRequest) -> ProbeResult:
    path = SHARED_XML if request.param == "shared" else REPO_XML
    if not path.exists():
        pytest.skip(f"{path} is not on this machine")
    return probe(path)


def test_the_h200_host_is_one_h200_with_its_memory_and_compute_capability(h200: ProbeResult) -> None:
    [gpu] = h200.gpus
    assert h200.found
    assert (gpu.name, gpu.memory_mib, gpu.compute_major, gpu.compute_minor) == ("NVIDIA H200", 143771, 9, 0)
    assert (h200.driver_version, h200.cuda_version) == ("580.159.04", "13.0")
    assert h200.node is not None
    assert h200.node.product is not None
    assert (h200.node.product.name, h200.node.product.memory_mib) == ("H200-141GB", 143771)
    assert (h200.node.gpu_count, h200.node.gpus_allocatable) == (1, 1)


def test_mig_is_capable_but_disabled_with_the_seven_h200_profiles(h200: ProbeResult) -> None:
    [gpu] = h200.gpus
    assert gpu.mig_capable and not gpu.mig_enabled and not gpu.mig_pending_enabled
    assert [(p.name, p.max_per_gpu) for p in gpu.mig_profiles] == H200_PROFILES
    assert h200.mig_profiles_source == "catalog"  # nvidia-smi -q carries no GPU-instance profiles
    assert h200.node is not None
    assert (h200.node.mig_strategy, h200.node.mig) == (MigStrategy.NONE, ())


def test_there_is_no_numa_information(h200: ProbeResult) -> None:
    [gpu] = h200.gpus
    assert gpu.numa_node is None
    assert h200.node is not None
    assert h200.node.numa_zones == ()
    assert h200.node.largest_numa_gpu_block == 1


def test_labels_are_what_gpu_feature_discovery_would_set(h200: ProbeResult) -> None:
    expected = {
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "159",
        "nvidia.com/cuda.driver-version.revision": "04",
        "nvidia.com/cuda.driver-version.full": "580.159.04",
        "nvidia.com/cuda.runtime-version.full": "13.0",
    }
    assert {k: h200.labels.get(k) for k in expected} == expected
    assert "nvidia.com/mig.strategy" not in h200.labels


def test_render_gives_json_yaml_and_a_table(h200: ProbeResult) -> None:
    as_json = json.loads(render(h200, "json"))
    as_yaml = yaml.safe_load(render(h200, "yaml"))
    table = render(h200, "table")

    assert as_json == as_yaml
    assert as_json["gpus"][0]["memory_mib"] == 143771
    assert as_json["node"]["product"]["name"] == "H200-141GB"
    assert [p["name"] for p in as_json["gpus"][0]["mig_profiles"]][-1] == "7g.141gb"
    assert "NVIDIA H200" in table and "H200-141GB" in table and "1g.18gb+me" in table
    with pytest.raises(ValueError, match="fmt"):
        render(h200, "xml")


def test_without_nvml_the_probe_says_no_nvidia_gpu_cleanly() -> None:
    result = probe()
    if result.source == "nvml":
        pytest.skip("this machine has an NVIDIA GPU")

    assert not result.found
    assert result.message.startswith("no NVIDIA GPU")
    assert result.node is None
    assert json.loads(render(result, "json"))["found"] is False
    assert "no NVIDIA GPU" in render(result, "table")


def test_an_unreadable_capture_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "q.xml"
    bad.write_text(
        "<nvidia_smi_log><gpu id='0'><product_name>NVIDIA H200</product_name>"
        "<fb_memory_usage><total>lots</total></fb_memory_usage></gpu></nvidia_smi_log>"
    )
    with pytest.raises(MalformedObject, match=r"gpu\[0\]\.fb_memory_usage\.total"):
        probe(bad)
    with pytest.raises(MalformedObject, match=r"q\.txt"):
        probe(tmp_path / "q.txt")
