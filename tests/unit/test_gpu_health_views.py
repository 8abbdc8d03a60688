"""GPU health as people see it: `gpufed fleet --nodes`' GPU HEALTH column and the API's node detail."""

from __future__ import annotations

from broker.api.gpu_health_view import cluster_gpu_health_view, fault_view
from broker.api.schemas import node_view
from broker.app.fleet_tables import gpu_health_text, nodes_table
from broker.capacity.node_detail import node_detail
from broker.cli.output import rich_text
from broker.core.gpu_health import NODE_WIDE, ClusterGpuHealth, GpuFault, GpuState, NodeQuarantine
from broker.core.model import GpuProduct, NodeFacts

SINCE = 1_796_688_000.0  # 2026-12-08 00:00:00Z
XID79 = "XID 79 (GPU has fallen off the bus)"
F3 = GpuFault("n0", 3, GpuState.UNHEALTHY, XID79, SINCE, "dcgm", 79, True, "default/train-0-x")
HEALTH = ClusterGpuHealth(
    faults=(F3, GpuFault("n0", 5, GpuState.UNHEALTHY, XID79, SINCE, "dcgm", 79, quarantined=False)),
    nodes=(NodeQuarantine("n1", "rule node-many-gpus: 3 GPUs faulted within 3600 s", SINCE),),
    breaker_open=True,
    breaker_reason="circuit breaker open: 4 of 24 GPUs quarantined within 3600 s (cap 4, 20%)",
    recent_faults=5,
    observed=True,
)
H100 = GpuProduct("H100-80GB", 81559)


def test_the_api_names_each_unhealthy_gpu_why_and_since_when() -> None:
    row = node_view(node_detail(NodeFacts("n0", H100, 8, 7, 0), health=HEALTH))
    assert row["gpuFaults"][0] == {
        "node": "n0", "gpu": 3, "state": "unhealthy", "reason": XID79, "xid": 79, "since": SINCE,
        "source": "dcgm", "quarantined": True, "pod": "default/train-0-x", "uuid": None,
    }  # fmt: skip
    assert (
        fault_view(GpuFault("n2", NODE_WIDE, GpuState.UNHEALTHY, "node condition X=True", SINCE))["gpu"]
        is None
    )
    body = cluster_gpu_health_view(HEALTH)
    assert body["unhealthyGpus"] == 2 and body["breakerOpen"] and body["quarantinedNodes"][0]["node"] == "n1"


def test_the_cli_column_says_which_gpu_why_and_since_when() -> None:
    n0 = node_view(node_detail(NodeFacts("n0", H100, 8, 7, 0), health=HEALTH))
    assert gpu_health_text(n0).splitlines() == [
        f"GPU 3 unhealthy: {XID79} since 2026-12-08 00:00:00Z",
        f"GPU 5 unhealthy: {XID79} since 2026-12-08 00:00:00Z (not quarantined: circuit breaker)",
    ]
    n1 = node_view(node_detail(NodeFacts("n1", H100, 8, 8, 0), health=HEALTH))
    assert gpu_health_text(n1) == "node quarantined: rule node-many-gpus: 3 GPUs faulted within 3600 s"
    n2 = node_view(node_detail(NodeFacts("n2", H100, 8, 8, 0), health=HEALTH))
    assert gpu_health_text(n2) == "healthy"
    text = rich_text(nodes_table("onprem-b", {"ageSeconds": 1.0, "items": [n0, n1, n2]}))
    assert "GPU HEALTH" in text and "XID 79" in text
