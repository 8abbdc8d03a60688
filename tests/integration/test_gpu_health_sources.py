"""GPU health from a member's real signals (docs/health.md) over real HTTPS: kubesim's dcgm-exporter pods
through the API server's pod proxy, its Prometheus API with a bearer token and CA file, and a node
condition written with real kubectl. A ClusterWatcher with its GpuHealthWatch reads them; the summary
it publishes carries which GPU is unhealthy and why, and free capacity drops exactly once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.cluster_watcher import ClusterWatcher
from adapters.gpu_health_watch import GpuHealthWatch
from broker.capacity.node_detail import nodes_table
from broker.config.gpu_health import BreakerConfig, GpuHealthConfig, MetricsConfig
from broker.core.gpu_health import ClusterGpuHealth, GpuState
from broker.core.model import ClusterSummary, ClusterTraits, Health
from broker.health.machine import HealthThresholds
from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.kubectl_cli import run_kubectl

pytestmark = pytest.mark.integration

CLUSTER = "gpus"
NODES = [f"{CLUSTER}-h100-{i}" for i in range(3)]
FLEET = {
    "clusters": [
        {
            "name": CLUSTER,
            "region": "eu-west",
            "dcgmExporter": {"enabled": True, "failAfterSeconds": 2},
            "nodePools": [
                {"name": "h100", "count": 3, "machine": "DGX-H100", "gpu": {"product": "H100-80GB"}}
            ],
        }
    ]
}
TRAITS = ClusterTraits(CLUSTER)
FAST = GpuHealthConfig(interval_seconds=0.5, recover_after_seconds=1)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulation]:
    with Simulation(parse_fleet(FLEET), tmp_path / "sim") as s:
        yield s


def watch(
    sim: Simulation, cfg: GpuHealthConfig = FAST, metrics: MetricsConfig | None = None
) -> ClusterWatcher:
    w = ClusterWatcher(
        CLUSTER,
        sim.kubeconfig_path(CLUSTER),
        flush_interval_s=0.02,
        health=HealthThresholds(probe_interval_seconds=0.5),
        gpu_health=GpuHealthWatch(CLUSTER, cfg, metrics),
    )
    w.start()
    wait_for(lambda: w.gpu_health is not None and w.gpu_health.reads > 0, 30, what="a first health read")
    return w


def health_of(w: ClusterWatcher) -> ClusterGpuHealth:
    assert w.gpu_health is not None
    return w.gpu_health.view()


def summary(w: ClusterWatcher) -> ClusterSummary:
    return w.summary(TRAITS)


def free(w: ClusterWatcher) -> int:
    (p,) = summary(w).products
    return p.free


def faults(w: ClusterWatcher) -> dict[tuple[str, int], tuple[str, str, bool]]:
    return {(f.node, f.gpu): (str(f.state), f.reason, f.quarantined) for f in summary(w).gpu_health.faults}


def fallen_off(node: str, gpu: int) -> dict[tuple[str, int], tuple[str, str, bool]]:
    return {(node, gpu): ("unhealthy", "XID 79 (GPU has fallen off the bus)", True)}


def check_fatal_xid(sim: Simulation, w: ClusterWatcher) -> None:
    assert free(w) == 24 and summary(w).gpu_health.faults == ()
    sim.gpu_xid(CLUSTER, NODES[0], 3, 79)
    wait_for(lambda: faults(w) == fallen_off(NODES[0], 3), 30, what="GPU 3 unhealthy with XID 79")
    # the device plugin dropped it from allocatable too: counted once, not twice
    wait_for(lambda: free(w) == 23, 30, what="free H100 down by exactly one")
    (p,) = summary(w).products
    assert p.nodes_by_free[8] == 2 and p.nodes_by_free[7] == 1
    row = next(r for r in nodes_table(w.snapshot().nodes, False, health_of(w)) if r.name == NODES[0])
    (f,) = row.gpu_faults
    assert (f.gpu, f.xid, f.state) == (3, 79, GpuState.UNHEALTHY) and f.since > 0
    sim.gpu_clear(CLUSTER, NODES[0], 3)
    wait_for(lambda: faults(w) == {}, 30, what="GPU 3 back after recoverAfterSeconds")
    wait_for(lambda: free(w) == 24, 30, what="free H100 back to 24")


def test_a_fatal_xid_through_the_pod_proxy(sim: Simulation) -> None:
    w = watch(sim)
    try:
        check_fatal_xid(sim, w)
    finally:
        w.stop()


def test_a_fatal_xid_through_the_members_prometheus(sim: Simulation, tmp_path: Path) -> None:
    token = tmp_path / "prom.token"
    token.write_text(sim.token(CLUSTER) + "\n")
    metrics = MetricsConfig(
        prometheus_url=sim.prometheus_url(CLUSTER), bearer_token_file=token, ca_file=sim.ca_path(CLUSTER)
    )
    no_proxy = FAST.model_copy(
        update={"dcgm_exporter": FAST.dcgm_exporter.model_copy(update={"enabled": False})}
    )
    w = watch(sim, no_proxy, metrics)
    try:
        check_fatal_xid(sim, w)
    finally:
        w.stop()


def test_an_application_xid_quarantines_nothing(sim: Simulation) -> None:
    w = watch(sim)
    try:
        sim.gpu_xid(CLUSTER, NODES[1], 2, 13)
        reads = w.gpu_health.reads if w.gpu_health else 0
        wait_for(lambda: w.gpu_health is not None and w.gpu_health.reads >= reads + 3, 30, what="three reads")
        assert faults(w) == {} and free(w) == 24
    finally:
        w.stop()


def test_five_fatal_xids_stop_at_the_circuit_breaker(sim: Simulation) -> None:
    w = watch(sim)  # 24 GPUs, breaker 20%: at most 4 quarantined within the hour
    try:
        for node, gpu in [(0, 0), (0, 4), (1, 0), (1, 4), (2, 0)]:
            sim.gpu_xid(CLUSTER, NODES[node], gpu, 79)
        wait_for(lambda: len(faults(w)) == 5, 30, what="five unhealthy GPUs")
        health = summary(w).gpu_health
        assert sum(f.quarantined for f in health.faults) == 4
        assert health.breaker_open and "cap 4" in health.breaker_reason
    finally:
        w.stop()


def test_a_node_condition_set_with_kubectl(sim: Simulation, tmp_path: Path) -> None:
    w = watch(sim, FAST.model_copy(update={"breaker": BreakerConfig(share=0.5)}))
    try:
        patch = {"status": {"conditions": [{"type": "GpuXidError", "status": "True", "reason": "XID79",
                                             "message": "XID 79 on GPU 5"}]}}  # fmt: skip
        run_kubectl(
            "patch", "node", NODES[2], "--subresource=status", "--type=merge", "-p", json.dumps(patch),
            kubeconfig=sim.kubeconfig_path(CLUSTER), cache=tmp_path / "kcache",
        )  # fmt: skip
        wait_for(lambda: (NODES[2], -1) in faults(w), 30, what="the node's condition as a node-wide fault")
        _, reason, quarantined = faults(w)[(NODES[2], -1)]
        assert reason == "node condition GpuXidError=True (XID 79 on GPU 5)" and quarantined
        wait_for(lambda: free(w) == 16, 30, what="the node's GPUs out of free capacity")
        row = next(r for r in nodes_table(w.snapshot().nodes, False, health_of(w)) if r.name == NODES[2])
        assert (
            row.offers_nothing == "GPU health quarantine: node condition GpuXidError=True (XID 79 on GPU 5)"
        )
        assert w.health == Health.HEALTHY
    finally:
        w.stop()
