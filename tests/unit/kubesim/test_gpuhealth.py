"""GPU health in a simulated cluster (kubesim/gpuhealth.py, dcgm.py, controllers/dcgm_exporter.py): the
exporter pods, whole-GPU indices at admission, what an XID does to the node and the pod on the GPU."""

from __future__ import annotations

from typing import Any

import pytest

from kubesim.dcgm import exposition, node_series
from kubesim.fleet import FleetError
from kubesim.gpuhealth import APPLICATION_XIDS, GpuFaultError, is_fatal, parse_xid_spec
from tests.unit.kubesim.world import World, bare_pod, pool, world

NODE = "c-h-0"


def gpu_world(**exporter: Any) -> World:
    h = pool("h", 2, dcgmExporter={"exclude": exporter.pop("pool_exclude", [])})
    return world({"name": "c", "nodePools": [h], "dcgmExporter": {"enabled": True, **exporter}})


def checkpointing_pod(name: str, gpus: int, node: str = NODE) -> dict[str, Any]:
    pod = bare_pod(
        name, {"nvidia.com/gpu": str(gpus)}, duration=3600, nodeSelector={"kubernetes.io/hostname": node}
    )
    pod["metadata"]["annotations"]["sim.gpufed.io/checkpoint-every-seconds"] = "60"
    return pod


def series(w: World, name: str, node: str = NODE) -> dict[str, tuple[dict[str, str], str]]:
    """gpu (plus xid when labelled) -> (labels, value) of one metric on one node."""
    out = {}
    for metric, labels, value in node_series(w.ctl.gpus, w.store.get("nodes", "", node), w.clock.now()):
        if metric == name:
            d = dict(labels)
            out[d["gpu"] + (f"/{d['xid']}" if "xid" in d else "")] = (d, value)
    return out


def allocatable(w: World, node: str = NODE) -> str:
    return str(w.store.get("nodes", "", node)["status"]["allocatable"]["nvidia.com/gpu"])


def test_every_gpu_node_gets_one_running_exporter_pod_like_the_gpu_operator_daemonset() -> None:
    w = gpu_world()
    w.settle()
    pods = w.pods("gpu-operator")
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["c-h-0", "c-h-1"]
    for p in pods:
        assert p["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
        assert p["status"]["phase"] == "Running" and p["status"]["podIP"]
        assert p["spec"]["containers"][0]["ports"] == [
            {"name": "metrics", "containerPort": 9400, "protocol": "TCP"}
        ]
    w.store.request_delete("pods", "gpu-operator", pods[0]["metadata"]["name"], 0)
    w.settle()
    assert len(w.pods("gpu-operator")) == 2, "the DaemonSet puts a deleted exporter pod back"


def test_no_exporter_without_dcgm_exporter_in_the_fleet() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.settle()
    assert w.store.list("pods", "gpu-operator")[0] == []


def test_the_kubelet_gives_whole_gpus_and_the_exporter_maps_them_to_the_pod() -> None:
    w = gpu_world()
    w.store.create("pods", checkpointing_pod("a", 3))
    w.store.create("pods", checkpointing_pod("b", 2))
    w.settle()
    assert w.pod("a")["metadata"]["annotations"]["sim.gpufed.io/gpus"] == "0,1,2"
    assert w.pod("b")["metadata"]["annotations"]["sim.gpufed.io/gpus"] == "3,4"
    temp = series(w, "DCGM_FI_DEV_GPU_TEMP")
    assert [temp[str(i)][0].get("pod") for i in range(8)] == ["a", "a", "a", "b", "b", None, None, None]
    labels = temp["3"][0]
    assert labels["namespace"] == "default" and labels["container"] == "main"
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["Hostname"] == NODE
    assert labels["device"] == "nvidia3" and labels["UUID"].startswith("GPU-")
    w.advance(3700)  # both finish: the mapping goes with them
    assert all("pod" not in lbls for lbls, _ in series(w, "DCGM_FI_DEV_GPU_TEMP").values())


def test_a_fatal_xid_takes_the_gpu_out_of_allocatable_and_fails_the_pod_from_its_checkpoint() -> None:
    w = gpu_world(failAfterSeconds=5)
    w.store.create("pods", checkpointing_pod("train", 8))
    w.advance(130)  # two periodic checkpoints: progress=120
    assert w.pod("train")["status"]["phase"] == "Running"
    w.ctl.gpus.xid(NODE, 3, 79, w.clock.now())
    assert allocatable(w) == "7"
    assert w.store.get("nodes", "", NODE)["status"]["capacity"]["nvidia.com/gpu"] == "8"
    xid = series(w, "DCGM_FI_DEV_XID_ERRORS")
    assert xid["3"][1] == "79" and xid["3"][0]["pod"] == "train", "the exporter still maps it until it fails"
    assert xid["2"][1] == "0"
    assert series(w, "DCGM_EXP_XID_ERRORS_TOTAL")["3/79"][1] == "1"
    w.advance(6)
    pod = w.pod("train")
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (1, "Error", "progress=120")
    # a new 8-GPU pod no longer fits the node; a 7-GPU one gets every GPU but 3
    w.store.create("pods", checkpointing_pod("seven", 7))
    w.settle()
    assert w.pod("seven")["metadata"]["annotations"]["sim.gpufed.io/gpus"] == "0,1,2,4,5,6,7"
    w.ctl.gpus.clear(NODE, 3)
    assert allocatable(w) == "8"
    assert series(w, "DCGM_FI_DEV_XID_ERRORS")["3"][1] == "0"
    assert series(w, "DCGM_EXP_XID_ERRORS_TOTAL")["3/79"][1] == "1", "counters keep their values"


def test_clearing_a_gpu_resets_its_volatile_ecc_count_as_a_gpu_reset_does() -> None:
    w = gpu_world()
    w.settle()
    w.ctl.gpus.xid(NODE, 2, 48, w.clock.now())
    w.ctl.gpus.xid(NODE, 2, 64, w.clock.now())
    assert series(w, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")["2"][1] == "1"
    w.ctl.gpus.clear(NODE, 2)
    assert series(w, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")["2"][1] == "0"
    assert series(w, "DCGM_FI_DEV_ROW_REMAP_FAILURE")["2"][1] == "0"
    assert series(w, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")["2"][1] == "1", "remapped rows stay remapped"


@pytest.mark.parametrize("code", sorted(APPLICATION_XIDS))
def test_an_application_xid_shows_in_the_exporter_but_leaves_gpu_and_pod_alone(code: int) -> None:
    w = gpu_world()
    w.store.create("pods", checkpointing_pod("train", 8))
    w.settle()
    w.ctl.gpus.xid(NODE, 0, code, w.clock.now())
    w.advance(30)
    assert allocatable(w) == "8"
    assert w.pod("train")["status"]["phase"] == "Running"
    assert series(w, "DCGM_FI_DEV_XID_ERRORS")["0"][1] == str(code)


@pytest.mark.parametrize(
    ("code", "metric", "value"),
    [
        (48, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1"),
        (94, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1"),
        (95, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1"),
        (63, "DCGM_FI_DEV_ROW_REMAP_PENDING", "1"),
        (64, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "1"),
        (64, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "1"),
        (79, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0"),
    ],
)
def test_xids_move_the_dcgm_fields_nvidia_ties_them_to(code: int, metric: str, value: str) -> None:
    w = gpu_world()
    w.settle()
    w.ctl.gpus.xid(NODE, 5, code, w.clock.now())
    assert series(w, metric)["5"][1] == value
    assert is_fatal(code)


def test_the_windowed_count_forgets_old_xids_and_the_total_does_not() -> None:
    w = gpu_world(xidWindowSeconds=60)
    w.settle()
    w.ctl.gpus.xid(NODE, 1, 13, w.clock.now())
    w.advance(30)
    w.ctl.gpus.xid(NODE, 1, 13, w.clock.now())
    count = series(w, "DCGM_EXP_XID_ERRORS_COUNT")["1/13"]
    assert count[1] == "2" and count[0]["window_size_in_ms"] == "60000"
    w.advance(45)
    assert series(w, "DCGM_EXP_XID_ERRORS_COUNT")["1/13"][1] == "1"
    w.advance(60)
    assert "1/13" not in series(w, "DCGM_EXP_XID_ERRORS_COUNT")
    assert series(w, "DCGM_EXP_XID_ERRORS_TOTAL")["1/13"][1] == "2"


def test_metrics_a_site_switched_off_are_absent_per_cluster_and_per_pool() -> None:
    w = gpu_world(exclude=["DCGM_EXP_XID_ERRORS_TOTAL"], pool_exclude=["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"])
    w.settle()
    w.ctl.gpus.xid(NODE, 0, 48, w.clock.now())
    text = exposition(node_series(w.ctl.gpus, w.store.get("nodes", "", NODE), w.clock.now())).decode()
    assert "DCGM_FI_DEV_XID_ERRORS{" in text and "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in text
    assert "DCGM_EXP_XID_ERRORS_TOTAL" not in text and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in text


def test_an_unknown_metric_in_exclude_is_a_fleet_error_naming_the_field() -> None:
    with pytest.raises(FleetError, match=r"dcgmExporter.exclude.*DCGM_NOPE"):
        gpu_world(exclude=["DCGM_NOPE"])


def test_a_pod_admitted_after_its_gpus_died_is_refused_as_the_kubelet_refuses_it() -> None:
    w = gpu_world()
    w.settle()
    # bound by hand to the node (as a scheduler that did not see the fault would)
    pod = checkpointing_pod("late", 8)
    pod["spec"]["nodeName"] = NODE
    w.ctl.gpus.xid(NODE, 6, 79, w.clock.now())
    w.store.create("pods", pod)
    w.settle()
    status = w.pod("late")["status"]
    assert status["phase"] == "Failed" and status["reason"] == "UnexpectedAdmissionError"
    assert "Requested: 8, Available: 7" in status["message"]


def test_faults_naming_an_unknown_node_or_gpu_are_refused() -> None:
    w = gpu_world()
    with pytest.raises(GpuFaultError, match="not found"):
        w.ctl.gpus.xid("nope", 0, 79, w.clock.now())
    with pytest.raises(GpuFaultError, match=r"0\.\.7, not 8"):
        w.ctl.gpus.xid(NODE, 8, 79, w.clock.now())
    assert parse_xid_spec("c-h-0:3:79") == ("c-h-0", 3, 79)
    assert parse_xid_spec("c-h-0:3", need_code=False) == ("c-h-0", 3, 0)
    with pytest.raises(GpuFaultError, match="NODE:GPU_INDEX:CODE"):
        parse_xid_spec("c-h-0:3")


def nrt_gpus(w: World, node: str = NODE) -> dict[str, tuple[str, str]]:
    """NUMA zone -> (allocatable, available) nvidia.com/gpu in the node's NodeResourceTopology."""
    nrt = w.store.get("noderesourcetopologies.topology.node.k8s.io", "", node)
    return {
        z["name"]: (r["allocatable"], r["available"])
        for z in nrt["zones"]
        for r in z["resources"]
        if r["name"] == "nvidia.com/gpu"
    }


def test_an_unhealthy_gpu_leaves_its_numa_zone_as_it_leaves_the_node() -> None:
    h = pool("h", 1, numa={"zones": 2, "policy": "single-numa-node", "scope": "pod"})
    w = world({"name": "c", "nodePools": [h], "dcgmExporter": {"enabled": True}})
    w.settle()
    assert nrt_gpus(w) == {"node-0": ("4", "4"), "node-1": ("4", "4")}
    w.ctl.gpus.xid(NODE, 3, 79, w.clock.now())  # GPU 3 is in zone 0 (GPUs 0-3)
    w.settle()
    assert allocatable(w) == "7"
    assert nrt_gpus(w) == {"node-0": ("3", "3"), "node-1": ("4", "4")}
    w.ctl.gpus.clear(NODE, 3)
    w.settle()
    assert nrt_gpus(w) == {"node-0": ("4", "4"), "node-1": ("4", "4")}
