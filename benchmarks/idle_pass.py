"""Benchmark: what one idle control-loop pass costs in Redis, at different numbers of running jobs.

Run: .venv/bin/python -m benchmarks.idle_pass [--clusters 20] [--jobs 40 150] [--passes 20]

A private redis-server; a leader BrokerService over the real RedisStateStore and a watching gateway
double (tests/service_doubles.py: Job statuses from memory, as the WatchingGateway serves them); one
idle 8-GPU summary per cluster. The jobs are placed and seen RUNNING, their reservations settle (one
summary written again per cluster), then `--passes` passes of the
ControlLoop run with nothing changing (timer passes: nothing woke the loop) (no poller heartbeats either: what is left is the loop's own
cost). Prints, per job count, the Redis commands and the job-record reads (HGET) per pass, from INFO
stats and commandstats deltas. docs/architecture.md ("what a pass costs") quotes these figures.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from broker.controller.control_loop import ControlLoop
from broker.controller.service import BrokerService
from broker.controller.work_queue import Wake
from broker.core.model import ClusterTraits, JobRequest, JobState
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import ManualClock, WatchedGateway, idle_h100_node


def commands(store: RedisStateStore) -> tuple[int, int]:
    """(commands processed, HGET calls) by the server so far."""
    info = store.client.info("stats")
    stats = store.client.info("commandstats")
    return int(info["total_commands_processed"]), int(stats.get("cmdstat_hget", {}).get("calls", 0))


def measure(redis_url: str, clusters: int, jobs: int, passes: int) -> tuple[float, float, int]:
    store = RedisStateStore(redis_url, prefix="idle" + uuid.uuid4().hex[:8])
    clock, gateway = ManualClock(), WatchedGateway()
    names = [f"c{i:02d}" for i in range(clusters)]
    for name in names:
        store.put_summary(idle_h100_node(name, clock.t))
    service = BrokerService(store, gateway, clock, {n: ClusterTraits(n) for n in names})
    service.watch_changes()
    for i in range(jobs):
        service.submit(JobRequest(f"j{i}", gpus_per_pod=1))
    service.schedule_once()
    for j in service.jobs([JobState.PLACED]):
        name = str(j.workload_name)
        status = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
        gateway.change(str(j.cluster), j.id, name, status)
    loop = ControlLoop(service)
    loop.run_once()  # the jobs' RUNNING transitions, and the first sweep
    loop.run_once()
    clock.t += 2.0  # the pollers count the pods (a summary written again): the reservations settle
    for name in names:
        store.put_summary(idle_h100_node(name, clock.t))
    loop.run_once()
    loop.run_once()
    running = len(service.jobs([JobState.RUNNING]))
    before = commands(store)
    for _ in range(passes):
        loop.run_once(frozenset({Wake.TIMER}))  # what the loop runs when nothing woke it
    after = commands(store)
    store.close()
    return (after[0] - before[0]) / passes, (after[1] - before[1]) / passes, running


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--jobs", type=int, nargs="+", default=[40, 150])
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    with private_redis(Path(tempfile.mkdtemp(prefix="idle-pass-"))) as redis:
        for jobs in args.jobs:
            per_pass, reads, running = measure(redis.url, args.clusters, jobs, args.passes)
            print(
                f"{args.clusters} clusters, {running} jobs RUNNING: {per_pass:.1f} Redis commands per idle "
                f"pass, {reads:.1f} job-record reads (HGET) per pass"
            )


if __name__ == "__main__":
    main()
