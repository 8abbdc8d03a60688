"""The broker's own member watches at many members, against kubesim over real HTTPS (issue 24).

- 60 member clusters, one MemberWatchingGateway (a Jobs informer per member, and a pods and an events
  informer where the broker has Jobs) paced by a ConnectGate of 4 slots: every member's Jobs are synced,
  never more than 4 connection set-ups were in flight, and each member saw one LIST of its Jobs (no
  relists). An idle member costs one watch, not three: the pods' and events' informers start when the
  broker's first Job appears there and stop when its last one has gone.
- suspend() (what a replica does when it is deposed): no watch left open on any member, reads become
  requests; start() (elected again) lists and watches afresh, and the caches answer again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.kube_informer import WatchSettings
from adapters.kube_rest import KubeRest
from adapters.member_watch import MemberWatchingGateway
from adapters.watch_pacing import ConnectGate
from broker.core.k8s_names import JOB_ID_LABEL
from broker.workload.manifest import ATTEMPT_LABEL
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import poll_for

pytestmark = pytest.mark.integration

NS = "default"
MEMBERS = 60
SLOTS = 4
SETTINGS = WatchSettings(
    watch_timeout_s=30,
    watch_timeout_jitter=0.5,
    read_slack_s=10,
    backoff_base_s=0.05,
    backoff_max_s=1.0,
    list_timeout=(5.0, 20.0),
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    # bookmarks as a kube-apiserver sends them (60 s), not 180 watches woken every 5 s
    with Simulation(
        synthetic_fleet(MEMBERS, 1),
        tmp_path_factory.mktemp("many"),
        speed=0,
        controllers=False,
        bookmark_interval=60.0,
    ) as s:
        yield s


def _rest(sim: Simulation, cluster: str) -> KubeRest:
    return KubeRest.from_kubeconfig(cluster, Path(sim.kubeconfig_path(cluster)))


def _lists(sim: Simulation, cluster: str) -> dict[str, int]:
    counts = sim.api(cluster).request_counts()
    return {r: n for (verb, r), n in counts.items() if verb == "list"}


def _watches(sim: Simulation) -> int:
    return sum(sim.call(lambda c=c: sim.api(c).watch_count) for c in sim.cluster_names())


def _broker_job(name: str) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {JOB_ID_LABEL: name, ATTEMPT_LABEL: "1"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}},
    }


def test_sixty_members_all_sync_through_a_gate_of_four_connection_set_ups(sim: Simulation) -> None:
    clusters = sim.cluster_names()
    assert len(clusters) == MEMBERS
    gate = ConnectGate(SLOTS)
    gw = MemberWatchingGateway(
        {c: _rest(sim, c) for c in clusters}, {c: NS for c in clusters}, SETTINGS, gate
    )
    before = {c: _lists(sim, c) for c in clusters}
    gw.start()
    try:
        poll_for(
            "every member's Jobs synced",
            lambda: all(gw.synced(c) for c in clusters) or None,
            120,
            interval=0.2,
        )
        poll_for("one watch open on every member", lambda: _watches(sim) == MEMBERS or None, 120, 0.2)
        assert gate.most_in_flight <= SLOTS
        assert gate.waited > 0, "60 informers started at once: most waited for a slot"
        assert gate.in_flight == 0
        for c in clusters:
            grew = {r: n - before[c].get(r, 0) for r, n in _lists(sim, c).items()}
            assert {r: n for r, n in grew.items() if n} == {"jobs.batch": 1}, c
        assert all(gw.follower.stats(c).errors == 0 for c in clusters)

        # the broker's Jobs appear in three members: their pods and events are watched there, and only there
        busy = clusters[:3]
        for c in busy:
            sim.call(lambda c=c: sim.store(c).create("jobs.batch", _broker_job(f"job-{c}")))
        poll_for(
            "pods and events watched where the Jobs are",
            lambda: _watches(sim) == MEMBERS + 6 or None,
            60,
            0.2,
        )
        for c in clusters:
            grew = {r: n - before[c].get(r, 0) for r, n in _lists(sim, c).items()}
            want = {"jobs.batch": 1, "pods": 1, "events": 1} if c in busy else {"jobs.batch": 1}
            assert {r: n for r, n in grew.items() if n} == want, c
        # their last Job gone: back to one watch each
        for c in busy:
            sim.call(lambda c=c: sim.store(c).delete("jobs.batch", NS, f"job-{c}"))
        poll_for("the pods' and events' watches closed", lambda: _watches(sim) == MEMBERS or None, 60, 0.2)
        sim.call(lambda: sim.store(busy[0]).create("jobs.batch", _broker_job("job-again")))

        # deposed: nothing watches any member, and reads are requests again
        gw.suspend()
        poll_for("no watch open on any member", lambda: _watches(sim) == 0 or None, 60, 0.2)
        assert not any(gw.synced(c) for c in clusters)
        lists_then = {c: _lists(sim, c) for c in clusters}

        # elected again: one more list of each, the caches answer again
        gw.start()
        poll_for(
            "every member's Jobs synced again",
            lambda: all(gw.synced(c) for c in clusters) or None,
            120,
            interval=0.2,
        )
        poll_for("the watches back", lambda: _watches(sim) == MEMBERS + 2 or None, 120, 0.2)
        for c in clusters:
            grew = {r: n - lists_then[c].get(r, 0) for r, n in _lists(sim, c).items()}
            want = {"jobs.batch": 1, "pods": 1, "events": 1} if c == busy[0] else {"jobs.batch": 1}
            assert {r: n for r, n in grew.items() if n} == want, c
        assert gate.most_in_flight <= SLOTS
    finally:
        gw.close()
