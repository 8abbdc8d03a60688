"""An idle pass costs nothing for the jobs held: with hundreds of jobs running and nothing changing, a
pass that nothing woke sends Redis only the health step's heartbeat read, the same commands as with no
job at all (real Redis, counted by its own INFO commandstats; a watching gateway double, a hand-moved
clock)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.control_loop import ControlLoop
from broker.controller.service import BrokerService
from broker.controller.status_sync import SETTLE_SECONDS
from broker.controller.work_queue import Wake
from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, JobState
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import ManualClock, WatchedGateway, idle_h100_node

CLUSTERS = ("a", "b")
NODES = 20  # per cluster: 2 x 20 x 8 = 320 GPUs
JOBS = 300


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="idleq" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def big_cluster(name: str, heartbeat: float) -> ClusterSummary:
    """NODES idle 8-GPU H100 nodes."""
    one = idle_h100_node(name, heartbeat)
    p = one.products[0]
    product = replace(
        p,
        total=8 * NODES,
        allocatable=8 * NODES,
        free=8 * NODES,
        nodes=NODES,
        nodes_by_free=(0,) * 8 + (NODES,),
        numa_blocks=(0,) * 4 + (2 * NODES,),
    )
    return replace(one, products=(product,))


def commands(store: RedisStateStore) -> dict[str, int]:
    """Calls per command the Redis server has answered so far (INFO itself left out)."""
    stats = store.client.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


def idle_passes(loop: ControlLoop, service: BrokerService, store: RedisStateStore, n: int) -> dict[str, int]:
    """The commands of n passes run as the loop runs them when nothing woke it."""
    before = commands(store)
    for _ in range(n):
        wakes = service.work.next_wakes(0)
        assert wakes == {Wake.TIMER}  # nothing woke it
        loop.run_once(wakes)
    after = commands(store)
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def test_an_idle_pass_with_hundreds_of_running_jobs_costs_only_the_heartbeat_read(
    store: RedisStateStore,
) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    for c in CLUSTERS:
        store.put_summary(big_cluster(c, clock.t))
    service = BrokerService(store, gateway, clock, {c: ClusterTraits(c) for c in CLUSTERS})
    service.watch_changes()
    loop = ControlLoop(service, sweep_interval_seconds=1e9)
    loop.run_once()  # a new leader's first pass: everything (records built, the sweep)
    empty = idle_passes(loop, service, store, 5)  # the fleet with no job: health reads the heartbeats

    for i in range(JOBS):
        service.submit(JobRequest(f"j{i}", gpus_per_pod=1))
    loop.run_once(service.work.next_wakes(0))  # woken by the submits: placed
    for j in service.jobs([JobState.PLACED]):
        name = str(j.workload_name)
        status = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
        gateway.change(str(j.cluster), j.id, name, status)  # the informer: its Job runs
    loop.run_once(service.work.next_wakes(0))
    assert len(service.jobs([JobState.RUNNING])) == JOBS
    clock.t += SETTLE_SECONDS + 1  # the pollers count the pods: the reservations settle
    for c in CLUSTERS:
        store.put_summary(big_cluster(c, clock.t))
    loop.run_once(service.work.next_wakes(0))
    loop.run_once(service.work.next_wakes(0))
    assert not service.status_due() and not service.queue_due()

    runs = dict(loop.step_runs)
    held = idle_passes(loop, service, store, 5)

    assert held == empty  # the jobs held cost no command: not a read of a record, a Job or the stream
    assert "cmdstat_hget" not in held and "cmdstat_xrange" not in held
    for step in ("sync_status", "schedule_once", "release_dependents"):  # nothing that reads the jobs ran
        assert loop.step_runs.get(step) == runs.get(step)
