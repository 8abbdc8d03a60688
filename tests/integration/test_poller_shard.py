"""A PollerShard (in this process, no Ray) publishes each cluster's summary from its watcher's index.

kubesim serves three small clusters over real HTTPS; the shard watches them and writes to a private Redis.
The summary in Redis must be what rollup.summarize says of the watcher's snapshot, and follow a change
in the cluster (how fast: benchmarks/capacity_freshness.py; a test waits with a generous deadline).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from adapters.poller_shard import PollerShard
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import PollerSpec
from broker.capacity import rollup
from broker.core.model import ClusterSummary, ClusterTraits, Health, Tier
from tests.conftest import poll_for

pytestmark = pytest.mark.integration

sim_mod = pytest.importorskip("kubesim.sim")
fleet_mod = pytest.importorskip("kubesim.fleet")

GPU = "nvidia.com/gpu"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], deadline_s: float = 60.0) -> T:
    """Poll `probe` until it holds; 60 s is generous for a loaded 2-core CI host (the wait ends as soon
    as it holds): how fast is benchmarks' business (docs/benchmarks.md), not a test's."""
    return poll_for(what, probe, deadline_s)


@pytest.fixture
def shard(tmp_path: Path, redis_url: str) -> Iterator[tuple[Any, PollerShard, RedisStateStore]]:
    fleet = fleet_mod.synthetic_fleet(3, 4, gpus_per_node=8)
    prefix = "shard" + uuid.uuid4().hex[:8]
    with sim_mod.Simulation(fleet, tmp_path, speed=0) as sim:
        names = [c.name for c in fleet.clusters]
        specs = [
            PollerSpec(
                n,
                sim.kubeconfig_path(n).as_posix(),
                None,
                ClusterTraits(name=n, tier=Tier.CLOUD, spot=True) if i == 2 else ClusterTraits(name=n),
            )
            for i, n in enumerate(names)
        ]
        poller = PollerShard(specs, redis_url, prefix, summary_interval_seconds=0.05)
        store = RedisStateStore(redis_url, prefix=prefix)
        poller.start()

        def healthy(name: str) -> bool:
            """Healthy, and every informer and probe has answered (health may come first: a summary written
            after it could still change, and a test counting versions would see that change as its own)."""
            s = store.get_summary(name)
            return (
                s is not None
                and s.health == Health.HEALTHY
                and s.namespaces_observed
                and s.workload_apis_observed
                and poller._watchers[name].capacity_known
            )

        try:
            for n in names:
                wait_for(f"{n} healthy", functools.partial(healthy, n))
            yield sim, poller, store
        finally:
            poller.stop()
            store.close()


def free_gpus(s: ClusterSummary | None) -> int:
    return sum(p.free for p in s.products) if s else -1


def _run_pod(sim: Any, cluster: str, name: str, gpus: int) -> str:
    """A running pod holding `gpus` GPUs on the cluster's first GPU node; that node's name."""
    nodes, _ = sim.call(lambda: sim.store(cluster).list("nodes"))
    node = sorted(n["metadata"]["name"] for n in nodes if GPU in (n["status"].get("allocatable") or {}))[0]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "schedulerName": "none",
            "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"limits": {GPU: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }
    sim.call(lambda: sim.store(cluster).create("pods", pod))
    return str(node)


def test_the_published_summary_is_what_summarize_says_of_the_snapshot(
    shard: tuple[Any, PollerShard, RedisStateStore],
) -> None:
    _, poller, store = shard
    for name, spec in sorted(poller._specs.items()):
        watcher = poller._watchers[name]
        written = poller.publish_cluster(name)
        snap = watcher.snapshot()
        assert len(snap.nodes) == 4
        want = rollup.summarize(snap, spec.traits, watcher.health, written.heartbeat)
        assert written.namespaces_observed  # tenant namespaces: from the watcher, not the node snapshot
        assert written.published_at >= written.heartbeat > 0  # the poller's own liveness, stamped
        assert (
            dataclasses.replace(
                written,
                version=0,
                published_at=0.0,
                health_reason="",
                health_since=0.0,
                namespaces=(),
                namespaces_observed=False,
                # which workload kinds it serves: the watcher's discovery after a probe, not the snapshot
                workload_apis=want.workload_apis,
                training_runtimes=want.training_runtimes,
                workload_apis_observed=want.workload_apis_observed,
                gpu_health=want.gpu_health,  # the cluster's GPU health reader's (docs/health.md)
            )
            == want
        )
        stored = store.get_summary(name)
        assert stored is not None and stored.products == want.products and stored.mig == want.mig


def test_a_pod_that_starts_and_ends_reaches_redis(
    shard: tuple[Any, PollerShard, RedisStateStore],
) -> None:
    sim, poller, store = shard
    c = sorted(poller._specs)[0]
    before = free_gpus(store.get_summary(c))
    _run_pod(sim, c, "p1", 2)
    wait_for("2 GPUs allocated in Redis", lambda: free_gpus(store.get_summary(c)) == before - 2)
    sim.call(lambda: sim.store(c).delete("pods", "default", "p1"))
    wait_for("the GPUs free again in Redis", lambda: free_gpus(store.get_summary(c)) == before)


def test_an_unchanged_cluster_gets_heartbeats_without_a_new_summary_version(
    shard: tuple[Any, PollerShard, RedisStateStore],
) -> None:
    """A heartbeat re-write bumped every summary's version every 2 s, so every placer's cache read every
    summary again and a reserve in flight failed its compare-and-set. Now only a change does."""
    sim, poller, store = shard
    c = sorted(poller._specs)[0]
    poller.publish_cluster(c)  # a full write to start from
    first = store.get_summary(c)
    assert first is not None
    marks = store.cluster_marks([c])[c]
    for _ in range(3):
        poller.write_summaries([c])
    beaten = store.get_summary(c)
    assert beaten is not None
    assert beaten.version == first.version  # nothing to read again
    assert beaten.published_at > first.published_at  # the poller's liveness moved on
    after = store.cluster_marks([c])[c]
    assert after.version == marks.version and after.written >= marks.written + 3
    assert dataclasses.replace(beaten, heartbeat=0.0, published_at=0.0) == dataclasses.replace(
        first, heartbeat=0.0, published_at=0.0
    )

    before = free_gpus(beaten)
    _run_pod(sim, c, "beat", 2)
    # a change is a new version, whichever write publishes it
    wait_for("2 GPUs allocated in Redis", lambda: free_gpus(store.get_summary(c)) == before - 2)
    changed = store.get_summary(c)
    assert changed is not None and changed.version > first.version

    # Redis lost the summary (or another writer came): the heartbeat is refused and written in full
    store.client.delete(f"{store.prefix}:summary:{c}")
    poller.write_summaries([c])
    wait_for("the summary written in full again", lambda: store.get_summary(c))


def test_a_node_table_is_written_again_only_when_the_cluster_changed(
    shard: tuple[Any, PollerShard, RedisStateStore],
) -> None:
    """Every table every 5 s was most of an idle fleet's Redis traffic: an unchanged one is not rewritten."""
    sim, poller, store = shard
    c = sorted(poller._specs)[0]
    wait_for("the first node table", lambda: store.get_nodes(c))
    poller.publish_nodes(c)  # written, or already current
    written = store.get_nodes(c)
    assert written is not None
    assert poller.publish_nodes(c) == 0  # nothing observed since: nothing written
    assert store.get_nodes(c) == written

    node = _run_pod(sim, c, "table", 3)

    def allocated() -> bool:
        table = store.get_nodes(c)
        row = next(r for r in table[0] if r.name == node) if table else None
        return row is not None and row.whole_free == row.whole_allocatable - 3

    wait_for("the new allocation in the node table", allocated)


def test_no_node_table_is_written_before_the_cluster_has_been_listed(tmp_path: Path, redis_url: str) -> None:
    """An empty table would tell `gpufed fleet --nodes` that a cluster with four GPU nodes has none."""
    fleet = fleet_mod.synthetic_fleet(1, 4, gpus_per_node=8)
    prefix = "shard" + uuid.uuid4().hex[:8]
    with sim_mod.Simulation(fleet, tmp_path, speed=0) as sim:
        name = fleet.clusters[0].name
        sim.faults(name).down()  # the member does not answer: nothing is listed
        poller = PollerShard(
            [PollerSpec(name, sim.kubeconfig_path(name).as_posix(), None, ClusterTraits(name=name))],
            redis_url,
            prefix,
            summary_interval_seconds=0.05,
        )
        store = RedisStateStore(redis_url, prefix=prefix)
        poller.start()
        try:
            wait_for(
                "a pass over the unlisted cluster",
                lambda: poller.publish_once() >= 0 and name in poller._watchers,
            )
            assert poller.publish_nodes(name) == 0
            assert store.get_nodes(name) is None
            sim.faults(name).up()
            table = wait_for("the node table", lambda: store.get_nodes(name))
            assert len(table[0]) == 4
        finally:
            poller.stop()
            store.close()


def test_capacity_is_known_once_every_informer_has_answered(tmp_path: Path) -> None:
    """The first node table must not miss NUMA zones or DRA devices because their (optional) informers had
    not listed yet: the walking skeleton's node-detail test saw a table without NUMA zones once in CI."""
    from adapters.cluster_watcher import ClusterWatcher
    from adapters.kube_informer import ALL_RESOURCES, FORBIDDEN

    fleet = fleet_mod.synthetic_fleet(1, 1, gpus_per_node=8)
    with sim_mod.Simulation(fleet, tmp_path, speed=0) as sim:
        name = fleet.clusters[0].name
        watcher = ClusterWatcher(name, sim.kubeconfig_path(name))  # not started: fed by hand
        try:
            required = [r.name for r in ALL_RESOURCES if not r.optional]
            optional = [r.name for r in ALL_RESOURCES if r.optional]
            for resource in required:
                watcher.replace(resource, [], "1")
                watcher.report(resource, "synced")
            assert not watcher.capacity_known  # NUMA topologies, DRA, quotas not answered yet
            for resource in optional[:-1]:
                watcher.replace(resource, [], "1")
                watcher.report(resource, "synced")
            assert not watcher.capacity_known
            watcher.report(optional[-1], FORBIDDEN, "forbidden", "forbidden")  # refused counts as answered
            assert watcher.capacity_known
        finally:
            watcher.stop()


def test_a_batch_of_changed_clusters_is_written_and_timed_from_each_ones_first_event(
    shard: tuple[Any, PollerShard, RedisStateStore],
) -> None:
    """The writer thread's batch: every cluster in it is written in one call, and the event-to-Redis
    histogram counts those whose batch began with a watch event, from that event (not a health change,
    which has none)."""
    _, poller, store = shard
    a, b = sorted(poller._specs)[:2]
    bounds = (0.1, 0.25, 1.0)
    poller.write_event_lags()  # what the cold sync observed, out of the way
    before = store.event_lags(bounds)

    written = poller.publish_changed({a: time.time() - 0.5, b: None})
    poller.write_event_lags()

    assert sorted(written) == [a, b]
    after = store.event_lags(bounds)
    count_a = before[a][2] if a in before else 0
    sum_a = before[a][1] if a in before else 0.0
    assert after[a][2] == count_a + 1
    assert after[a][1] - sum_a >= 0.5  # counted from the batch's first event, half a second ago
    assert (after[b][2] if b in after else 0) == (before[b][2] if b in before else 0)
