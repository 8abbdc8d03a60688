"""The broker's Jobs followed by watch: WatchingGateway against kubesim over real HTTPS.

A user of the broker cares that a job's state follows its Job in the member cluster, and an operator of
a member cluster that the broker does not poll it: these tests change Jobs through the gateway (real
HTTP) or the simulated cluster's store (on the simulation's loop, via sim.call), poll the gateway's
answers with a deadline, and count the requests the cluster served with kubesim's request counters.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson
import pytest

from adapters.job_informer import WatchingGateway
from adapters.kube_informer import WatchSettings
from adapters.kube_rest import KubeRest
from broker.app import main as composition
from broker.app.demo import read_demo_tokens, write_demo_config
from broker.config.settings import load_fleet_config
from broker.core.errors import ClusterUnreachable
from broker.workload.manifest import ATTEMPT_LABEL, JOB_ID_LABEL
from kubesim.fleet import load_fleet, synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, poll_for

pytestmark = pytest.mark.integration

NS = "default"
JOBS = "jobs.batch"
T = TypeVar("T")

SETTINGS = WatchSettings(
    watch_timeout_s=30,
    read_slack_s=5,
    backoff_base_s=0.05,
    backoff_max_s=0.5,
    list_timeout=(1.0, 10.0),
    list_attempts=2,
)


def wait_for(what: str, probe: Callable[[], T | None], deadline_s: float = 10.0) -> T:
    return poll_for(what, probe, deadline_s)


def job(name: str, job_id: str | None, attempt: int = 1) -> dict[str, Any]:
    labels = {JOB_ID_LABEL: job_id, ATTEMPT_LABEL: str(attempt)} if job_id else {"team": "other"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            }
        },
    }


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulation]:
    # No controllers: a Job changes only when a test changes it.
    with Simulation(synthetic_fleet(2, 1), tmp_path, speed=0, controllers=False) as s:
        yield s


@pytest.fixture
def gateway(sim: Simulation) -> Iterator[WatchingGateway]:
    clusters = sim.cluster_names()
    gw = WatchingGateway.watching(
        {c: (sim.kubeconfig_path(c), None) for c in clusters}, {c: NS for c in clusters}, SETTINGS
    )
    gw.start()
    try:
        wait_for("every cluster's Jobs synced", lambda: all(gw.synced(c) for c in clusters))
        yield gw
    finally:
        gw.close()


def requests(sim: Simulation, cluster: str, verb: str, resource: str = JOBS) -> int:
    counts: dict[tuple[str, str], int] = sim.api(cluster).request_counts()
    return counts.get((verb, resource), 0)


def complete(sim: Simulation, cluster: str, name: str) -> None:
    def mark(obj: dict[str, Any]) -> None:
        obj["status"] = {
            "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}],
        }

    sim.call(lambda: sim.store(cluster).mutate(JOBS, NS, name, mark))


def test_a_jobs_creation_update_and_deletion_are_seen_without_a_get(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    cluster = sim.cluster_names()[0]
    cache = gateway.follower.caches[cluster]
    gateway.create_workload(cluster, job("train-1", "job-1"))
    wait_for("the created Job in the cache", lambda: cache.get("train-1"))
    gets = requests(sim, cluster, "get")

    status = gateway.read_workload(cluster, NS, "train-1")
    assert status.exists and not status.complete

    complete(sim, cluster, "train-1")
    done = wait_for("Complete seen", lambda: gateway.read_workload(cluster, NS, "train-1").complete)
    assert done
    assert gateway.read_workload(cluster, NS, "train-1").succeeded == 1

    gateway.delete_workload(cluster, NS, "train-1")
    wait_for("the deleted Job gone from the cache", lambda: cache.get("train-1") is None)
    assert requests(sim, cluster, "get") == gets, "status reads of a followed Job cost no GET"
    assert gateway.served_from_cache >= 3


def test_a_cluster_added_later_is_followed_too(sim: Simulation) -> None:
    first, later = sim.cluster_names()
    gw = WatchingGateway.watching({first: (sim.kubeconfig_path(first), None)}, {first: NS}, SETTINGS)
    gw.start()
    try:
        gw.add_cluster(KubeRest.from_kubeconfig(later, sim.kubeconfig_path(later)), NS)
        wait_for("the added cluster's Jobs synced", lambda: gw.synced(later))
        gw.create_workload(later, job("on-later", "job-l"))
        wait_for("its Job in the cache", lambda: gw.follower.caches[later].get("on-later"))
        gets = requests(sim, later, "get")
        assert gw.read_workload(later, NS, "on-later").exists
        assert requests(sim, later, "get") == gets
    finally:
        gw.close()


def test_a_job_the_cache_does_not_hold_is_confirmed_gone_by_one_get(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    cluster = sim.cluster_names()[0]
    gets = requests(sim, cluster, "get")
    status = gateway.read_workload(cluster, NS, "never-created")
    assert not status.exists
    assert requests(sim, cluster, "get") == gets + 1


def test_only_the_brokers_labelled_jobs_are_followed_and_listed_from_memory(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    cluster = sim.cluster_names()[1]
    gateway.create_workload(cluster, job("ours-a", "job-a", attempt=2))
    gateway.create_workload(cluster, job("theirs", None))
    cache = gateway.follower.caches[cluster]
    wait_for("our Job in the cache", lambda: cache.get("ours-a"))
    lists = requests(sim, cluster, "list")

    refs = gateway.list_workloads(cluster, NS)

    assert [(r.name, r.job_id, r.attempt) for r in refs] == [("ours-a", "job-a", 2)]
    assert cache.get("theirs") is None
    assert requests(sim, cluster, "list") == lists, "list_workloads from a synced cache costs no LIST"


def test_the_listing_version_moves_only_when_the_jobs_held_move_and_is_none_off_the_cache(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    """broker.core.ports.ListingVersion: what lets the sweep skip a cluster whose Jobs did not move."""
    cluster = sim.cluster_names()[1]
    before = gateway.listing_version(cluster, NS)
    assert before is not None
    gateway.list_workloads(cluster, NS)
    gateway.read_workload(cluster, NS, "never-created")
    assert gateway.listing_version(cluster, NS) == before, "reads move nothing"
    gateway.create_workload(cluster, job("ours-v", "job-v"))
    moved = wait_for("a new version", lambda: (v := gateway.listing_version(cluster, NS)) != before and v)
    assert moved is not None and moved > before
    assert gateway.listing_version(cluster, "elsewhere") is None  # a namespace the cache does not hold
    gateway.suspend()  # a follower's lists are requests: no version
    assert gateway.listing_version(cluster, NS) is None


def test_after_410_gone_the_informer_relists_and_sees_what_it_missed(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    cluster = sim.cluster_names()[0]
    store = sim.store(cluster)
    gateway.create_workload(cluster, job("old", "job-old"))
    cache = gateway.follower.caches[cluster]
    wait_for("the first Job in the cache", lambda: cache.get("old"))
    stats = gateway.follower.stats(cluster)
    lists_before = stats.lists

    # While the cluster is down: its Jobs change and their watch history is dropped.
    sim.faults(cluster).down()
    wait_for("the cache unsynced while the cluster is down", lambda: not gateway.synced(cluster))
    with pytest.raises(ClusterUnreachable):
        gateway.read_workload(cluster, NS, "old")  # never a stale answer from an unsynced cache
    sim.call(lambda: store.delete(JOBS, NS, "old"))
    sim.call(lambda: store.create(JOBS, job("new", "job-new")))
    sim.call(lambda: store.compact(JOBS, 0))
    sim.faults(cluster).up()

    wait_for("a relist after 410 Gone", lambda: stats.relists_410 >= 1 and stats.lists > lists_before)
    wait_for("the Job created while down", lambda: cache.get("new"))
    assert cache.get("old") is None
    assert gateway.synced(cluster)
    assert gateway.read_workload(cluster, NS, "new").exists


def test_the_admin_endpoint_counts_requests_per_verb_and_resource(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    cluster = sim.cluster_names()[0]
    gateway.create_workload(cluster, job("counted", "job-c"))
    with urllib.request.urlopen(f"{sim.admin_url}/clusters/{cluster}/requests", timeout=10) as resp:
        body = orjson.loads(resp.read())
    counts = {(r["verb"], r["resource"]): r["count"] for r in body["requests"]}
    assert counts[("create", JOBS)] == 1
    assert counts[("list", JOBS)] >= 1 and counts[("watch", JOBS)] >= 1
    assert body["total"] == sum(counts.values())


def test_a_watch_the_server_ends_is_followed_by_the_next_on_the_same_connection(sim: Simulation) -> None:
    # Watches of 1 s, ended by the server (timeoutSeconds) as a real API server ends them; the client
    # reuses the keep-alive connection for the next watch, which must be served, not hang.
    cluster = sim.cluster_names()[0]
    short = WatchSettings(
        watch_timeout_s=1, read_slack_s=30, backoff_base_s=0.05, backoff_max_s=0.5, list_attempts=2
    )
    gw = WatchingGateway.watching({cluster: (sim.kubeconfig_path(cluster), None)}, {cluster: NS}, short)
    gw.start()
    try:
        wait_for("synced", lambda: gw.synced(cluster))
        watches = requests(sim, cluster, "watch")
        wait_for("two more watches", lambda: requests(sim, cluster, "watch") >= watches + 2)
        gw.create_workload(cluster, job("late", "job-late"))
        wait_for("a Job created after watches ended", lambda: gw.follower.caches[cluster].get("late"))
        assert gw.follower.stats(cluster).errors == 0, "a watch the server ended is no error"
    finally:
        gw.close()


def test_kubesim_serves_the_next_request_on_the_connection_of_a_watch_it_ended(sim: Simulation) -> None:
    # A real API server ends a watch at timeoutSeconds with the connection kept alive; clients reuse it.
    cluster = sim.cluster_names()[0]
    url = urllib.parse.urlsplit(sim.server_url(cluster))
    tls = ssl.create_default_context(cafile=str(sim.ca_path(cluster)))
    conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=tls, timeout=10)
    headers = {"Authorization": f"Bearer {sim.token(cluster)}"}
    try:
        for _ in range(3):
            conn.request(
                "GET", "/apis/batch/v1/namespaces/default/jobs?watch=true&timeoutSeconds=1", headers=headers
            )
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()  # the server ends the stream after 1 s
        conn.request("GET", "/apis/batch/v1/namespaces/default/jobs", headers=headers)
        resp = conn.getresponse()
        assert resp.status == 200 and orjson.loads(resp.read())["kind"] == "JobList"
        assert conn.sock is not None, "the same connection served every request"
    finally:
        conn.close()


def test_the_broker_follows_its_running_jobs_without_a_get_per_pass(
    tmp_path: Path, redis_url: str, ray_session: None
) -> None:
    # The real wiring (broker.app.main.running_broker): jobs submitted over HTTP run in kubesim clusters;
    # while they run, the control loop's passes read their status and cost those clusters no GET.
    fleet = load_fleet(Path(__file__).resolve().parents[2] / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path / "sim", speed=1.0) as sim:
        kubeconfigs = {c: sim.kubeconfig_path(c) for c in sim.cluster_names()}
        cfg = load_fleet_config(
            write_demo_config(tmp_path, kubeconfigs, redis_url, "follow" + uuid.uuid4().hex[:8])
        )
        port = free_port()
        auth = {"Authorization": "Bearer " + read_demo_tokens(tmp_path)["admin"]}
        with composition.running_broker(cfg, port=port) as broker:
            url = f"http://127.0.0.1:{port}"
            wait_for(
                "every cluster's summary",
                lambda: len(httpx.get(f"{url}/v1/fleet", headers=auth).json()["clusters"]) == 3,
                60,
            )
            ids = []
            for i in range(4):
                body = {"name": f"long-{i}", "gpus": 1, "durationSeconds": 3600}
                r = httpx.post(f"{url}/v1/jobs", json=body, timeout=30, headers=auth)
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])

            def all_running() -> bool:
                return all(
                    httpx.get(f"{url}/v1/jobs/{j}", headers=auth).json()["state"] == "RUNNING" for j in ids
                )

            wait_for("the jobs RUNNING", all_running, 60)
            wait_for(
                "every cluster's Jobs followed", lambda: all(broker.gateway.synced(c) for c in kubeconfigs)
            )
            gets = {c: requests(sim, c, "get") for c in kubeconfigs}
            passes = broker.loop.passes
            wait_for("ten more control-loop passes", lambda: broker.loop.passes >= passes + 10, 30)
            assert {c: requests(sim, c, "get") for c in kubeconfigs} == gets
            assert all(
                httpx.get(f"{url}/v1/jobs/{j}", headers=auth).json()["state"] == "RUNNING" for j in ids
            )


def test_a_jobs_status_change_is_told_to_the_subscriber_and_a_create_needs_no_get(
    sim: Simulation, gateway: WatchingGateway
) -> None:
    cluster = sim.cluster_names()[0]
    told: list[tuple[str, str]] = []
    gateway.subscribe(lambda c, job_id: told.append((c, job_id)))
    gets = requests(sim, cluster, "get")

    gateway.create_workload(cluster, job("ours-told", "job-told"))
    status = gateway.read_workload(cluster, NS, "ours-told")  # the POST answer, before any watch event

    assert status.exists
    assert requests(sim, cluster, "get") == gets
    wait_for("the create told", lambda: (cluster, "job-told") in told or None)

    told.clear()
    complete(sim, cluster, "ours-told")
    wait_for("the completion told", lambda: (cluster, "job-told") in told or None)
    assert gateway.read_workload(cluster, NS, "ours-told").complete
