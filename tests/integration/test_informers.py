"""Informers against kubesim over real HTTPS: the summary in Redis follows the cluster.

Each test changes a simulated cluster through its store (on the simulation's loop, via sim.call) and
polls the ClusterSummary that the ClusterWatcher's callback wrote to a private Redis, with a deadline
generous for a loaded CI host (how fast it follows is measured in benchmarks/capacity_freshness.py).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from adapters.kube import ClusterWatcher, KubeGateway, WatchSettings
from adapters.redis_store import RedisStateStore
from broker.capacity import rollup
from broker.core.errors import ClusterForbidden, ClusterRejected, ClusterUnreachable
from broker.core.model import ClusterSnapshot, ClusterSummary, ClusterTraits, Health
from broker.health.machine import HealthThresholds
from tests.conftest import poll_for

pytestmark = pytest.mark.integration

sim_mod = pytest.importorskip("kubesim.sim", reason="kubesim.sim has not landed yet")
fleet_mod = pytest.importorskip("kubesim.fleet")

DEADLINE_S = 60.0  # generous for a loaded 2-core CI host: a wait ends as soon as its probe holds
GPU = "nvidia.com/gpu"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], deadline_s: float = DEADLINE_S) -> T:
    return poll_for(what, probe, deadline_s)


@dataclass
class World:
    sim: Any
    store: RedisStateStore
    watchers: dict[str, ClusterWatcher]
    clusters: list[str]

    def summary(self, cluster: str) -> ClusterSummary | None:
        return self.store.get_summary(cluster)

    def call(self, fn: Callable[[], T]) -> T:
        result: T = self.sim.call(fn)
        return result

    def objects(self, cluster: str, key: str) -> list[dict[str, Any]]:
        items, _ = self.call(lambda: self.sim.store(cluster).list(key))
        return [copy.deepcopy(o) for o in items]


@pytest.fixture
def world(tmp_path: Path, redis_url: str) -> Iterator[World]:
    fleet = fleet_mod.synthetic_fleet(3, 4, gpus_per_node=8)
    store = RedisStateStore(redis_url, prefix="inf" + uuid.uuid4().hex[:8])
    settings = WatchSettings(
        watch_timeout_s=30,
        read_slack_s=5,
        backoff_base_s=0.05,
        backoff_max_s=0.5,
        list_timeout=(1.0, 10.0),
        list_attempts=2,
    )
    with sim_mod.Simulation(fleet, tmp_path, speed=0) as sim:
        clusters = [c.name for c in fleet.clusters]
        watchers: dict[str, ClusterWatcher] = {}
        for name in clusters:
            traits = ClusterTraits(name=name)

            def publish(
                snap: ClusterSnapshot, health: Health, heartbeat: float, t: ClusterTraits = traits
            ) -> None:
                store.put_summary(rollup.summarize(snap, t, health, heartbeat))

            w = ClusterWatcher(
                name,
                sim.kubeconfig_path(name),
                on_snapshot=publish,
                settings=settings,
                flush_interval_s=0.02,
                health=HealthThresholds(lost_seconds=3.0, recover_seconds=1.0),
            )
            w.start()
            watchers[name] = w
        world = World(sim, store, watchers, clusters)
        for name in clusters:
            wait_for(f"{name} synced", healthy(world, name))
        try:
            yield world
        finally:
            for w in watchers.values():
                w.stop()
            store.close()


def healthy(world: World, cluster: str, health: Health = Health.HEALTHY) -> Callable[[], bool]:
    def check() -> bool:
        s = world.summary(cluster)
        return s is not None and s.health == health

    return check


def free_gpus(s: ClusterSummary | None) -> int:
    return sum(p.free for p in s.products) if s else -1


def first_gpu_node(world: World, cluster: str) -> dict[str, Any]:
    return sorted(
        (n for n in world.objects(cluster, "nodes") if GPU in (n["status"].get("allocatable") or {})),
        key=lambda n: n["metadata"]["name"],
    )[0]


def gpu_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"test": "informers"}},
        "spec": {
            "nodeName": node,
            "schedulerName": "none",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def set_phase(world: World, cluster: str, name: str, phase: str) -> None:
    def edit(p: dict[str, Any]) -> None:
        p.setdefault("status", {})["phase"] = phase

    world.call(lambda: world.sim.store(cluster).mutate("pods", "default", name, edit))


# --------------------------------------------------------------------------- tests


def test_pods_that_start_and_finish_move_the_free_gpus(world: World) -> None:
    c = world.clusters[0]
    before = free_gpus(world.summary(c))
    node = first_gpu_node(world, c)["metadata"]["name"]

    world.call(lambda: world.sim.store(c).create("pods", gpu_pod("train-0", node, 3)))
    wait_for("3 GPUs allocated", lambda: free_gpus(world.summary(c)) == before - 3)

    set_phase(world, c, "train-0", "Succeeded")
    wait_for("the GPUs free again", lambda: free_gpus(world.summary(c)) == before)


def test_a_cordoned_node_stops_counting_as_free(world: World) -> None:
    c = world.clusters[0]
    before = free_gpus(world.summary(c))
    node = first_gpu_node(world, c)
    per_node = int(node["status"]["allocatable"][GPU])

    def cordon(n: dict[str, Any]) -> None:
        n.setdefault("spec", {})["unschedulable"] = True

    world.call(lambda: world.sim.store(c).mutate("nodes", "", node["metadata"]["name"], cordon))
    wait_for(
        "the cordoned node's GPUs gone from free", lambda: free_gpus(world.summary(c)) == before - per_node
    )


def test_a_mig_layout_change_shows_in_the_summary(world: World) -> None:
    c = world.clusters[0]
    name = first_gpu_node(world, c)["metadata"]["name"]

    def to_mixed(n: dict[str, Any]) -> None:
        labels = n["metadata"]["labels"]
        labels["nvidia.com/mig.strategy"] = "mixed"
        labels["nvidia.com/mig.config.state"] = "success"
        alloc = n["status"]["allocatable"]
        alloc.pop(GPU, None)
        n["status"].get("capacity", {}).pop(GPU, None)
        alloc["nvidia.com/mig-1g.10gb"] = "56"
        n["status"].setdefault("capacity", {})["nvidia.com/mig-1g.10gb"] = "56"

    world.call(lambda: world.sim.store(c).mutate("nodes", "", name, to_mixed))

    def mig_slices() -> int:
        s = world.summary(c)
        return sum(m.free for m in s.mig if m.profile == "1g.10gb") if s else 0

    assert wait_for("56 free 1g.10gb slices", lambda: mig_slices() == 56)


def test_a_410_forces_a_relist_and_the_state_is_still_right(world: World) -> None:
    c = world.clusters[1]
    before = free_gpus(world.summary(c))
    node = first_gpu_node(world, c)["metadata"]["name"]
    relists = world.watchers[c].stats.informers["pods"].relists_410

    def change_behind_the_watch() -> None:
        st = world.sim.store(c)
        st.create("pods", gpu_pod("hidden", node, 2))
        st.mutate("nodes", "", node, lambda n: n["metadata"]["labels"].__setitem__("touched", "yes"))
        st.compact("pods", keep=0)
        world.sim.api(c).cut_watches()

    world.call(change_behind_the_watch)

    wait_for("a relist after 410", lambda: world.watchers[c].stats.informers["pods"].relists_410 > relists)
    wait_for("the hidden pod counted", lambda: free_gpus(world.summary(c)) == before - 2)


def test_a_cluster_that_is_down_is_unreachable_while_the_others_keep_syncing(world: World) -> None:
    down, alive = world.clusters[0], world.clusters[2]
    world.sim.faults(down).down()
    world.sim.faults(down).cut_watches()
    wait_for(
        "the down cluster unreachable",
        lambda: (s := world.summary(down)) and s.health == Health.UNREACHABLE,
    )

    before = free_gpus(world.summary(alive))
    node = first_gpu_node(world, alive)["metadata"]["name"]
    world.call(lambda: world.sim.store(alive).create("pods", gpu_pod("still-syncing", node, 1)))
    wait_for("the other cluster still syncs", lambda: free_gpus(world.summary(alive)) == before - 1)

    world.sim.faults(down).up()
    wait_for("the cluster back", healthy(world, down))


def test_a_malformed_node_is_skipped_and_counted(world: World) -> None:
    c = world.clusters[2]
    before = world.summary(c)
    assert before is not None
    name = first_gpu_node(world, c)["metadata"]["name"]
    per_node_free = int(first_gpu_node(world, c)["status"]["allocatable"][GPU])

    def break_it(n: dict[str, Any]) -> None:
        n["metadata"]["labels"]["nvidia.com/gpu.count"] = "eight"

    world.call(lambda: world.sim.store(c).mutate("nodes", "", name, break_it))

    def with_bad_node() -> ClusterSummary | None:
        x = world.summary(c)
        return x if x is not None and x.bad_nodes == 1 else None

    s = wait_for("the bad node counted", with_bad_node)
    assert free_gpus(s) == free_gpus(before) - per_node_free
    assert world.watchers[c].snapshot().bad_nodes == (name,)
    assert all(w.health == Health.HEALTHY for w in world.watchers.values())


def test_the_gateway_creates_reads_and_deletes_a_job(world: World) -> None:
    c = world.clusters[0]
    gw = KubeGateway.from_kubeconfigs({n: (world.sim.kubeconfig_path(n), None) for n in world.clusters})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gpufed-j1-0", "namespace": "default", "labels": {"gpufed.io/job-id": "j1"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox:1.36", "resources": {"limits": {GPU: "1"}}}
                    ],
                }
            },
        },
    }
    try:
        gw.create_workload(c, job)
        gw.create_workload(c, job)  # a retried create is harmless
        status = gw.read_workload(c, "default", "gpufed-j1-0")
        assert status.exists and status.suspended

        gw.delete_workload(c, "default", "gpufed-j1-0")
        gw.delete_workload(c, "default", "gpufed-j1-0")  # gone already is fine
        wait_for("the job gone", lambda: not gw.read_workload(c, "default", "gpufed-j1-0").exists)
        assert not gw.read_workload(c, "default", "never-there").exists
    finally:
        gw.close()


def test_revoked_credentials_are_forbidden_and_a_dead_cluster_is_unreachable(world: World) -> None:
    c = world.clusters[1]
    gw = KubeGateway.from_kubeconfigs({c: (world.sim.kubeconfig_path(c), None)})
    try:
        world.sim.faults(c).set(forbidden=True, cut_watches=True)
        with pytest.raises(ClusterForbidden, match=c):
            gw.read_workload(c, "default", "any")
        wait_for("the watcher reports forbidden", healthy(world, c, Health.FORBIDDEN))

        # the summary the pollers publish says which list/watch was refused, in the cluster's own words
        # (each informer meets the refusal on its own next request: the nodes one among them, soon)
        def nodes_refused() -> str | None:
            reason = world.watchers[c].summary(ClusterTraits(name=c)).health_reason
            return reason if "list/watch nodes" in reason else None

        assert "403" in wait_for("the refused node list/watch named in the reason", nodes_refused)

        world.sim.faults(c).set(clear=True, down=True)
        with pytest.raises(ClusterUnreachable, match=c):
            gw.read_workload(c, "default", "any")
        with pytest.raises(ClusterRejected, match="not a member"):
            gw.read_workload("elsewhere", "default", "any")
    finally:
        world.sim.faults(c).clear()
        gw.close()
