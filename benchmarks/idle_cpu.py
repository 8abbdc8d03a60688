"""Benchmark: the CPU one idle control-loop pass costs the broker, at a fleet's number of running jobs.

Run: .venv/bin/python -m benchmarks.idle_cpu [--clusters 20] [--jobs 8000] [--passes 60]

A private redis-server; a leader BrokerService over the real RedisStateStore and a watching gateway
double (tests/service_doubles.py: Job statuses from memory; here also the members' pods, all calm, as
MemberWatch, and the Jobs listed from memory with a version, as broker.core.ports.ListingVersion); one
50-node summary per cluster, rewritten every 4th pass (the pollers' 2 s heartbeat at 0.5 s passes). The
jobs are placed and seen RUNNING, then `--passes` idle passes run with the status resync held off, then
the resync (every job compared with the informer cache, once a minute) alone, then the sweep of every
cluster (every 30 s) after one that walked them. Prints CPU-milliseconds (time.process_time, so less
sensitive to other load than wall time): the median pass, the resync, the sweep, and what they add up to
at 2 passes a second.
Unlike benchmarks/fleet_scale.py it leaves out the HTTP API, the informer threads and the pollers: it is
the loop's own share, the part that must not grow with the jobs held.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from broker.controller.control_loop import ControlLoop
from broker.controller.service import BrokerService
from broker.core.model import ClusterSummary, ClusterTraits, JobRequest, JobState
from broker.core.workloads import MemberTrouble, WorkloadRef, WorkloadStatus
from tests.service_doubles import ManualClock, WatchedGateway, idle_h100_node


class CachedGateway(WatchedGateway):
    """The watching double, with what the real one serves from its informers' memory: the members'
    pods (all calm: MemberWatch) and each cluster's Jobs listed with a version (ListingVersion)."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: dict[str, list[WorkloadRef]] = {}
        self.version = 1

    def hold(self, cluster: str, ref: WorkloadRef) -> None:
        self.listed.setdefault(cluster, []).append(ref)
        self.version += 1

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        return list(self.listed.get(cluster, ()))

    def listing_version(self, cluster: str, namespace: str) -> int | None:
        return self.version

    def member_trouble(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return MemberTrouble()

    def last_termination(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return MemberTrouble()


def summary(cluster: str, heartbeat: float, nodes: int = 50) -> ClusterSummary:
    """An idle cluster of `nodes` 8-GPU H100 nodes."""
    s = idle_h100_node(cluster, heartbeat)
    p = replace(
        s.products[0],
        total=8 * nodes,
        allocatable=8 * nodes,
        free=8 * nodes,
        nodes_by_free=(0,) * 8 + (nodes,),
        numa_blocks=(0,) * 4 + (2 * nodes,),
        nodes=nodes,
    )
    return replace(s, products=(p,))


def measure(redis_url: str, clusters: int, jobs: int, passes: int) -> tuple[int, float, float, float, float]:
    """(jobs running, median idle pass CPU seconds, resync CPU seconds, the sweep of every cluster when
    one walks them, and when nothing moved since: CPU seconds)."""
    store = RedisStateStore(redis_url, prefix="idlecpu" + uuid.uuid4().hex[:8])
    clock, gateway = ManualClock(), CachedGateway()
    names = [f"c{i:02d}" for i in range(clusters)]
    nodes = max(1, -(-jobs // (8 * clusters)))
    for name in names:
        store.put_summary(summary(name, clock.t, nodes))
    service = BrokerService(store, gateway, clock, {n: ClusterTraits(n) for n in names})
    service.watch_changes()
    for i in range(jobs):
        service.submit(JobRequest(f"j{i}", gpus_per_pod=1))
    for _ in range(50):
        service.schedule_once()
        if not service.jobs([JobState.QUEUED]):
            break
    for j in service.jobs([JobState.PLACED]):
        name = str(j.workload_name)
        status = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
        gateway.change(str(j.cluster), j.id, name, status)
        gateway.hold(str(j.cluster), WorkloadRef(name, "default", j.id, j.attempt))
    loop = ControlLoop(service)
    for _ in range(5):
        loop.run_once()  # RUNNING transitions, the first sweep
    clock.t += 0.5
    for name in names:
        store.put_summary(summary(name, clock.t, nodes))
    for _ in range(3):
        loop.run_once()  # the settled reservations released
    running = len(service.jobs([JobState.RUNNING]))
    spent: list[float] = []
    for i in range(passes):
        clock.t += 0.5
        if i % 4 == 0:
            for name in names:
                store.put_summary(summary(name, clock.t, nodes))
        service._next_resync = clock.t + 1e9  # the resync is measured on its own below
        started = time.process_time()
        loop.run_once()
        spent.append(time.process_time() - started)
    resyncs: list[float] = []
    for _ in range(3):
        service._next_resync = 0.0
        started = time.process_time()
        service.sync_status()
        resyncs.append(time.process_time() - started)
    sweeps: list[float] = []
    for i in range(4):
        if i % 2 == 0:
            gateway.version += 1  # a Job moved in every cluster: the next sweep walks them
        started = time.process_time()
        for name in names:
            service.sweep_cluster(name)
        sweeps.append(time.process_time() - started)
    store.close()
    walked, quiet = min(sweeps[0::2]), min(sweeps[1::2])
    return running, sorted(spent)[len(spent) // 2], min(resyncs), walked, quiet


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--passes", type=int, default=60)
    args = parser.parse_args()
    with private_redis(Path(tempfile.mkdtemp(prefix="idle-cpu-"))) as redis:
        running, per_pass, resync, walked, quiet = measure(redis.url, args.clusters, args.jobs, args.passes)
    share = (per_pass * 2 + resync / 60 + quiet / 30) * 100
    print(
        f"{args.clusters} clusters, {running} jobs RUNNING: idle pass {per_pass * 1000:.2f} ms CPU (median of "
        f"{args.passes}), status resync {resync * 1000:.0f} ms CPU once a minute, sweep of every cluster "
        f"{quiet * 1000:.1f} ms CPU every 30 s ({walked * 1000:.1f} ms when it walks them): "
        f"{share:.2f}% of a core"
    )


if __name__ == "__main__":
    main()
