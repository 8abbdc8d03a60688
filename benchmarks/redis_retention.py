"""Redis memory per finished job held, and what the retention purge gives back (issue 48 finding 3).

A private redis-server; `--jobs` jobs submitted through the API's path (BrokerService.submit with an
Idempotency-Key: record, indexes, key, "submitted" event), each then taken through PLACED and RUNNING to
SUCCEEDED by the store's save_job (one event each, as the control loop writes them); `used_memory` before,
after, and after the purge (adapters.redis_retention, retention 0). Prints one JSON line.

    PYTHONPATH=. .venv/bin/python benchmarks/redis_retention.py --jobs 5000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobEvent, JobRequest, JobState
from tests.service_doubles import ManualClock, RecordingGateway


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    with private_redis() as server:
        store = RedisStateStore(server.url, prefix="bench", idempotency_ttl_seconds=86400)
        service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
        r = store.client
        r.set("bench:run-id", "bench")
        base = int(r.info("memory")["used_memory"])
        started = time.perf_counter()
        for i in range(args.jobs):
            req = JobRequest(name=f"job-{i}", gpus_per_pod=1, duration_seconds=60, labels={"team": "ml"})
            record, _ = service.submit(req, idempotency_key=f"key-{i:08d}")
            for state in (JobState.PLACED, JobState.RUNNING, JobState.SUCCEEDED):
                record = dataclasses.replace(record, state=state, cluster="c1", reason=f"now {state.value}")
                store.save_job(
                    record, event=JobEvent(record.id, i, state, record.attempt, record.reason, "c1")
                )
        held = int(r.info("memory")["used_memory"])
        purged = 0
        while True:
            n = store.purge_finished(-1)
            purged += n
            if n == 0:
                break
        after = int(r.info("memory")["used_memory"])
        print(
            json.dumps(
                {
                    "jobs": args.jobs,
                    "bytes_per_job_held": round((held - base) / args.jobs),
                    "bytes_per_job_after_purge": round((after - base) / args.jobs),
                    "purged": purged,
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
        )
        store.close()


if __name__ == "__main__":
    main()
