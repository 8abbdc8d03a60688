"""One poller fleet per deployment on a shared Ray cluster (issue 24; adapters/ray_shared.py).

On this host: a Ray cluster of two nodes (`ray start --head`, `ray start --address`, token
authentication on), two kubesim clusters, a private Redis, and two `gpufed serve` replicas joined to the
Ray cluster through RAY_ADDRESS (and the cluster's RAY_AUTH_TOKEN). Shown, in order:
    - one replica: `pollerShards` detached shard actors in the namespace gpufed-<prefix>, one per Ray
      node (SPREAD); each member's list and watch requests counted (kubesim's apiserver_request_total);
    - a second replica: still that many shards, and no member sees one more list or watch at all (the
      gateway's member informers, gpufed's Jobs and their pods and FailedCreate events, run only in the
      leader);
    - SIGKILL of the leader replica while a job runs: no summary older than 5 s while the survivor takes
      the lease; still the same shards (same processes), the survivor leads them; the survivor's
      informers list and watch each member once (the pollers do not list again), and the job is
      followed to SUCCEEDED;
    - SIGKILL of the worker node's raylet (the Ray node that hosts a shard is lost): that shard runs
      again on the head node and its clusters are published again within clusterLostSeconds / 2;
    - SIGTERM of the last replica: it takes the shards down (nothing left running on the Ray cluster).
"""

from __future__ import annotations

import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from adapters.redis_store import RedisStateStore
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, poll_for
from tests.integration.ray_cluster import Probe, RayCluster

pytestmark = [pytest.mark.integration, pytest.mark.race]

REPO = Path(__file__).resolve().parents[2]
PREFIX = "rf"  # the ring gives each of the 2 shards one of sim-000 and sim-001
NAMESPACE = f"gpufed-{PREFIX}"
SHARDS = 2
LOST_SECONDS = 40.0  # the node-loss deadline is half of it; a loaded 2-core host starts a Ray worker slowly
RUN_SECONDS = 45  # a job still running when the leader is killed (kubesim at speed 1)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    # a short root of its own: under pytest-xdist, tmp_path (/tmp/pytest-of-<user>/pytest-N/popen-gwK/...)
    # makes Ray's socket paths longer than AF_UNIX's 107 bytes
    root = Path(tempfile.mkdtemp(prefix="gf-rf-", dir="/tmp"))
    cluster = RayCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    # controllers on: a job's Job runs and completes (after RUN_SECONDS)
    with Simulation(synthetic_fleet(2, 2), tmp_path_factory.mktemp("kubeconfigs")) as s:
        yield s


def _config(tmp: Path, sim: Simulation, redis_url: str) -> tuple[Path, dict[str, str]]:
    tokens, auth = admin_tokens(tmp)
    doc = {
        "clusters": [
            {
                "name": n,
                "kubeconfig": str(sim.kubeconfig_path(n)),
                "tier": "on-prem",
                "region": "eu-west",
                # GPU health's pod-proxy source lists the dcgm-exporter pods (GET .../gpu-operator/pods)
                # every intervalSeconds: a poll, not an informer, counted as a pods list whenever it
                # lands inside a window below. This test counts the informers' lists, so that source is
                # off (these members run no exporter); node conditions and taints are still read.
                "gpuHealth": {"dcgmExporter": {"enabled": False}},
            }
            for n in sim.cluster_names()
        ],
        "settings": {
            "redisUrl": redis_url,
            "redisPrefix": PREFIX,
            "pollerShards": SHARDS,
            "clusterLostSeconds": LOST_SECONDS,
            "leaseSeconds": 3,
            "configReloadSeconds": 0,
        },
        "auth": {"tokensFile": str(tokens)},
    }
    path = tmp / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, auth


def _replica(cluster: RayCluster, cfg: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in cluster.env().items() if k != "REDIS_URL"}
    env |= {"RAY_ADDRESS": cluster.address, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "broker.cli", "serve", "--config", str(cfg), "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _lists(sim: Simulation, cluster: str) -> dict[str, float]:
    """kubesim's apiserver_request_total{verb="list"} of one member, by resource."""
    r = httpx.get(
        f"{sim.server_url(cluster)}/metrics",
        headers={"Authorization": f"Bearer {sim.token(cluster)}"},
        verify=ssl.create_default_context(cafile=str(sim.ca_path(cluster))),
        timeout=10,
    )
    r.raise_for_status()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == "apiserver_request_total" and s.labels["verb"] == "list":
                out[s.labels["resource"]] = out.get(s.labels["resource"], 0.0) + s.value
    return out


def _load(sim: Simulation) -> dict[str, tuple[dict[str, float], int]]:
    """Per member: its list requests by resource, and the watches open on it now. (Every informer
    re-watches every 20 s, so the watch counter grows with time; the open watches do not.)"""
    return {c: (_lists(sim, c), sim.call(lambda c=c: sim.api(c).watch_count)) for c in sim.cluster_names()}


def _settled(sim: Simulation) -> dict[str, tuple[dict[str, float], int]]:
    """The members' load once it has not moved for 3 s."""
    last: list[Any] = [None, 0.0]

    def probe() -> dict[str, tuple[dict[str, float], int]] | None:
        now = _load(sim)
        if now != last[0]:
            last[:] = [now, time.monotonic()]
            return None
        return now if time.monotonic() - last[1] >= 3.0 else None

    return poll_for("the members' list/watch load to settle", probe, 90, interval=0.5)


def _added(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The list requests that came between two loads, by resource (those that did)."""
    grew = {r: after.get(r, 0) - before.get(r, 0) for r in {*before, *after}}
    return {r: n for r, n in grew.items() if n}


def _submit(port: int, auth: dict[str, str]) -> str:
    body = {"name": "across-failover", "gpus": 1, "durationSeconds": RUN_SECONDS}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/jobs", json=body, headers=auth, timeout=10)
    assert r.status_code == 201, r.text
    job_id: str = r.json()["id"]
    return job_id


def _state(port: int, auth: dict[str, str], job_id: str) -> str | None:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/v1/jobs/{job_id}", headers=auth, timeout=5)
    except httpx.HTTPError:
        return None
    return str(r.json()["state"]) if r.status_code == 200 else None


def _shards(probe: Probe) -> dict[str, Any]:
    actors = probe.ask("actors")
    return {k: v for k, v in actors.items() if k.startswith(f"gpufed-poller-{PREFIX}-")}


def _ages(store: RedisStateStore) -> dict[str, float]:
    now = time.time()
    return {s.cluster: now - s.published_at for s in store.observed_summaries()}


def _status(port: int, auth: dict[str, str]) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/v1/status", headers=auth, timeout=5)
    except httpx.HTTPError:
        return None
    return dict(r.json()) if r.status_code == 200 else None


def _pid_of(holder: str | None) -> int | None:
    m = re.match(r"^.*-(\d+)-[0-9a-f]{6}$", holder or "")
    return int(m.group(1)) if m else None


def test_two_replicas_share_one_detached_poller_fleet_that_outlives_them(
    ray_cluster: RayCluster, sim: Simulation, redis_url: str, tmp_path: Path
) -> None:
    cfg, auth = _config(tmp_path, sim, redis_url)
    store = RedisStateStore(redis_url, prefix=PREFIX)
    probe = Probe(ray_cluster, NAMESPACE)
    ports = [free_port(), free_port()]
    replicas: list[subprocess.Popen[bytes]] = []
    clusters = set(sim.cluster_names())
    try:
        # one replica: the shards, one per Ray node (once both nodes' resources are known: SPREAD
        # chooses among the nodes the scheduler knows)
        poll_for("2 Ray nodes with their CPUs", lambda: probe.ask("nodes")["cpus"] == 2, 60, 0.5)
        replicas.append(_replica(ray_cluster, cfg, ports[0], tmp_path / "replica-0.log"))
        poll_for(
            "both clusters published",
            lambda: {c for c, age in _ages(store).items() if age < 5} == clusters,
            180,
            interval=0.5,
        )
        nodes = probe.ask("nodes")
        assert len(nodes["alive"]) == 2

        def all_answering() -> dict[str, Any] | None:
            found = _shards(probe)
            return found if len(found) == SHARDS and all(found.values()) else None

        shards = poll_for(f"{SHARDS} shards answering", all_answering, 60, interval=0.5)
        assert all(len(info["clusters"]) == 1 for info in shards.values()), shards  # one cluster each
        assert {info["node"] for info in shards.values()} == set(nodes["alive"])  # spread
        one = _settled(sim)

        # a second replica: no second fleet, and no list or watch request of its own (a follower's
        # gateway runs no informer; a second poller fleet would list nodes, pods, ... again)
        replicas.append(_replica(ray_cluster, cfg, ports[1], tmp_path / "replica-1.log"))
        poll_for("the second replica to serve", lambda: _status(ports[1], auth), 120, interval=0.5)
        two = _settled(sim)
        for c in clusters:
            assert _added(one[c][0], two[c][0]) == {}, (c, one[c], two[c])
            assert two[c][1] == one[c][1], (c, one[c], two[c])  # the same watches open
        assert {k: v["pid"] for k, v in _shards(probe).items()} == {k: v["pid"] for k, v in shards.items()}

        # SIGKILL of the leader while a job runs: the summaries stay fresh while the other replica takes over
        leader_pid = _pid_of((_status(ports[0], auth) or {}).get("leader"))
        assert leader_pid in (replicas[0].pid, replicas[1].pid)
        gone = 0 if leader_pid == replicas[0].pid else 1
        survivor = ports[1 - gone]
        job_id = _submit(ports[1 - gone], auth)
        poll_for("the job RUNNING", lambda: _state(survivor, auth, job_id) == "RUNNING" or None, 90, 0.5)
        running = _settled(sim)
        replicas[gone].send_signal(signal.SIGKILL)
        replicas[gone].wait(timeout=30)
        worst = 0.0
        deadline = time.monotonic() + 3 * 3 + 10  # the lease (3 s) runs out, the survivor leads
        taken = False
        while time.monotonic() < deadline or not taken:
            ages = _ages(store)
            assert set(ages) == clusters
            worst = max(worst, *ages.values())
            status = _status(survivor, auth)
            taken = bool(status and status.get("role") == "leader")
            if time.monotonic() > deadline + 60:
                pytest.fail(f"the surviving replica did not take the lease: {status}")
            time.sleep(0.25)
        assert worst <= 5.0, f"a summary was {worst:.1f} s old after the leader was killed"
        log = tmp_path / f"replica-{1 - gone}.log"
        poll_for(
            "the survivor to lead the shards", lambda: "leading the poller shards" in log.read_text(), 60, 0.5
        )
        after = _shards(probe)
        assert {k: v["pid"] for k, v in after.items()} == {k: v["pid"] for k, v in shards.items()}
        # the survivor's gateway now lists and watches each member, once (the pods and events only where
        # the job runs: a member without gpufed's Jobs has no pod of theirs to follow); the shards did not
        # list again
        took_over = _settled(sim)
        where = httpx.get(f"http://127.0.0.1:{survivor}/v1/jobs/{job_id}", headers=auth, timeout=5).json()
        for c in clusters:
            added = _added(running[c][0], took_over[c][0])
            # the new leader's first sweep may list gpufed's Jobs before its informer has
            assert added.pop("jobs", 0) in (1, 2), (c, running[c], took_over[c])
            want = {"pods": 1, "events": 1} if c == where["cluster"] else {}
            assert added == want, (c, where["cluster"], running[c], took_over[c])
            assert took_over[c][1] == running[c][1], (c, running[c], took_over[c])  # the same watches
        poll_for("the job SUCCEEDED", lambda: _state(survivor, auth, job_id) == "SUCCEEDED" or None, 120, 0.5)

        # the worker Ray node is lost: its shard runs again on the head, its clusters fresh again
        head = nodes["head"]
        moved = next(name for name, info in after.items() if info["node"] != head)
        its_clusters = set(after[moved]["clusters"])
        assert its_clusters
        killed_at = time.time()
        ray_cluster.kill_node(1)

        def fresh_on_head() -> bool:
            info = _shards(probe).get(moved)
            if not info or info["node"] != head:
                return False
            published = {s.cluster: s.published_at for s in store.observed_summaries()}
            return all(published[c] > killed_at + 1.0 for c in its_clusters)

        poll_for(f"{moved}'s clusters fresh again on the head node", fresh_on_head, LOST_SECONDS / 2, 0.5)
        assert len(_shards(probe)) == SHARDS

        # the last replica stops: the shards go with it
        replicas[1 - gone].send_signal(signal.SIGTERM)
        assert replicas[1 - gone].wait(timeout=60) == 0
        poll_for("no shard left on the Ray cluster", lambda: not _shards(probe) or None, 30, 0.5)
    finally:
        for r in replicas:
            if r.poll() is None:
                r.kill()
                r.wait(timeout=30)
        probe.close()
        store.close()
