"""The poller fleet on real Ray: shards that survive a SIGKILL, and a config reload without a restart.

kubesim serves small clusters over HTTPS, PollerFleet runs its shards and supervisor as Ray actors, and
the summaries land in a real Redis. What a user cares about:
- after the shard's process is killed, the summaries are fresh again within seconds (Ray restarts the
  actor, which resumes by itself), and meanwhile no reader is told the clusters are healthy: the
  heartbeat is the last successful call, so observed_health() reads them unreachable (stale);
- set_clusters() adds a cluster (its summary appears) and removes one (its summary goes, for good),
  and a shard restarted after that still follows the new list, not the one it was created with.
"""

from __future__ import annotations

import functools
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from adapters.ray_actors import PollerFleet
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import PollerSpec
from broker.core.model import ClusterTraits, Health
from broker.health.machine import STALE_POLLER, HealthThresholds, observed_health
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import poll_for

pytestmark = pytest.mark.integration

LOST = 4.0
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], deadline_s: float) -> T:
    return poll_for(what, probe, deadline_s, interval=0.1)


def healthy(store: RedisStateStore, name: str) -> bool:
    s = store.get_summary(name)
    return s is not None and s.health == Health.HEALTHY


def spec(sim: Simulation, name: str) -> PollerSpec:
    return PollerSpec(name, sim.kubeconfig_path(name).as_posix(), None, ClusterTraits(name=name))


@pytest.fixture
def fleet(
    ray_session: None, tmp_path: Path, redis_url: str
) -> Iterator[tuple[Simulation, PollerFleet, RedisStateStore, list[str]]]:
    world = synthetic_fleet(4, 2, gpus_per_node=8)
    prefix = "fleet" + uuid.uuid4().hex[:8]
    with Simulation(world, tmp_path, speed=0, controllers=False) as sim:
        names = [c.name for c in world.clusters]
        pollers = PollerFleet(
            [spec(sim, n) for n in names[:3]],
            redis_url,
            prefix,
            shards=2,
            summary_interval_seconds=0.1,
            health=HealthThresholds(lost_seconds=LOST, recover_seconds=1.0),
        )
        store = RedisStateStore(redis_url, prefix=prefix)
        pollers.start()
        try:
            for n in names[:3]:
                wait_for(f"{n} healthy", functools.partial(healthy, store, n), 60)
            yield sim, pollers, store, names
        finally:
            pollers.stop()
            store.close()


def fresh_and_healthy(store: RedisStateStore, names: list[str], after: float) -> bool:
    now = time.time()
    for n in names:
        s = store.get_summary(n)
        if s is None or s.heartbeat <= after or observed_health(s, now, LOST).health != Health.HEALTHY:
            return False
    return True


@pytest.mark.race
def test_a_killed_shard_resumes_by_itself_and_is_never_read_healthy_while_dead(
    fleet: tuple[Simulation, PollerFleet, RedisStateStore, list[str]],
) -> None:
    _, pollers, store, names = fleet
    clusters = names[:3]
    pids = pollers.shard_pids()
    assignment = pollers.assignment()
    victim = max(assignment, key=lambda s: len(assignment[s]))  # the shard with the most clusters
    owned = assignment[victim]
    assert owned

    killed_at = time.time()
    os.kill(pids[victim], signal.SIGKILL)

    # Until the restarted shard reports, every read of its clusters is either still within lost_seconds
    # of their last success, or unreachable (stale): never healthy on an old heartbeat.
    stale_seen: set[str] = set()

    def back() -> bool:
        now = time.time()
        for n in owned:
            s = store.get_summary(n)
            assert s is not None
            view = observed_health(s, now, LOST)
            if not s.heartbeat:  # the restarted shard's first word, before its first successful call:
                # "connecting" (or its first failure), or, when the shard then says nothing more for
                # lost_seconds (a busy machine), its poller is stale
                assert view.health is Health.UNKNOWN or (
                    view.health is Health.UNREACHABLE and STALE_POLLER in view.reason
                ), view
            elif now - s.heartbeat >= LOST:
                assert view.health == Health.UNREACHABLE and STALE_POLLER in view.reason, view
                stale_seen.add(n)
        return fresh_and_healthy(store, clusters, killed_at)

    wait_for("every summary fresh and healthy again", back, 90)
    assert pollers.shard_pids()[victim] != pids[victim]  # a new process did it
    # The clusters of the other shard never went stale.
    assert not stale_seen & (set(clusters) - set(owned))


def test_set_clusters_adds_and_removes_without_a_restart_and_a_restarted_shard_follows(
    fleet: tuple[Simulation, PollerFleet, RedisStateStore, list[str]],
) -> None:
    sim, pollers, store, names = fleet
    removed, added = names[0], names[3]
    kept = [n for n in names[1:3]]
    pids = pollers.shard_pids()

    assignment = pollers.set_clusters([spec(sim, n) for n in [*kept, added]])
    assert sorted(c for group in assignment.values() for c in group) == sorted([*kept, added])
    assert pollers.shard_pids() == pids  # nothing restarted
    wait_for(f"{added} healthy", functools.partial(healthy, store, added), 30)
    wait_for(f"{removed} forgotten", lambda: store.get_summary(removed) is None, 10)

    # Kill every shard: Ray restarts them with the arguments they were created with (the old list);
    # the supervisor must bring them to the current list.
    killed_at = time.time()
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
    wait_for("the new list fresh again", lambda: fresh_and_healthy(store, [*kept, added], killed_at), 90)
    assert store.get_summary(removed) is None

    def both_restarts_seen() -> dict[str, Any] | None:
        st = pollers.status()
        return st if sum(st["restarts"].values()) == 2 else None

    status = wait_for("the supervisor has seen both restarts", both_restarts_seen, 30)
    assert status["generation"] == 2
