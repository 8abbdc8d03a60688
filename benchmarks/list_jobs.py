"""GET /v1/jobs?limit=N at a given number of jobs held: the cost of one page, and of a whole walk.

    .venv/bin/python -m benchmarks.list_jobs [--jobs 8000] [--queued 500] [--limit 500 (0: unpaged)] [--walks 5]
        [--spy PY_SPY]

A private redis-server holds `--jobs` job records (all but `--queued` of them RUNNING, spread over 20
clusters, two tenants) written through the store as submits are; the API runs in this process
(uvicorn on a loopback port, auth on, an admin's Bearer token), and the walks go over TCP with one
keep-alive httpx client. Prints each page's p50/p99, the CPU per page (on a shared machine the figures
that do not depend on the others' load): this process's, split into the server's (the process's less
the client thread's) and the client's, and redis-server's (its INFO cpu); and whether the walk returned
every job once;
`--spy PY_SPY` samples this process with py-spy during the walks (folded stacks in
/tmp/gpufed-list-jobs.spy.txt).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn
import yaml

TOKEN = "bench-admin-token-0123456789abcdef"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--queued", type=int, default=500)
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--walks", type=int, default=5)
    parser.add_argument("--spy", type=Path, default=None)
    args = parser.parse_args()

    from dataclasses import replace

    from adapters import redis_process
    from adapters.loopback_ports import free_port
    from adapters.redis_store import RedisStateStore
    from adapters.system_clock import SystemClock
    from broker.api.routes import create_app
    from broker.config.settings import load_tokens
    from broker.controller.service import BrokerService
    from broker.core.model import ClusterTraits, JobRecord, JobRequest, JobState
    from tests.service_doubles import RecordingGateway

    with tempfile.TemporaryDirectory() as tmp, redis_process.private_redis(Path(tmp)) as redis:
        store = RedisStateStore(redis.url, prefix="listbench")
        clusters = [f"sim-{c:03d}" for c in range(20)]
        now = time.time()
        records = []
        for i in range(args.jobs):
            request = JobRequest(f"job-{i}", gpus_per_pod=1, tenant=("research", "vision")[i % 2])
            record = JobRecord(id=f"j{i:012x}", request=request, created_at=now + i * 1e-3, updated_at=now)
            records.append(record)
        for i in range(0, len(records), 500):
            store.create_jobs([(r, None) for r in records[i : i + 500]])
        for r in records[args.queued :]:
            store.save_job(replace(r, state=JobState.RUNNING, cluster=clusters[hash(r.id) % 20]))
        tokens = Path(tmp) / "tokens.yaml"
        tokens.write_text(yaml.safe_dump([{"name": "ops", "tenant": "ops", "role": "admin", "token": TOKEN}]))
        clock = SystemClock()
        service = BrokerService(store, RecordingGateway(), clock, {c: ClusterTraits(c) for c in clusters})
        app = create_app(service, clock, tokens=load_tokens(tokens), jobs=store)
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        pages: list[float] = []
        walks: list[tuple[int, float, float, float]] = []  # pages, process CPU, client thread CPU, redis CPU
        spy = None
        if args.spy is not None:
            out = "/tmp/gpufed-list-jobs.spy.txt"
            command = [
                str(args.spy),
                "record",
                "-p",
                str(os.getpid()),
                "--format",
                "raw",
                "-r",
                "250",
                "-o",
                out,
            ]
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as http:
            for _ in range(args.walks):
                ids: list[str] = []
                token = None
                first_page = len(pages)
                redis_cpu0, cpu0, client0 = _redis_cpu(store), time.process_time(), time.thread_time()
                while True:
                    params = {"limit": args.limit} if args.limit else {}  # --limit 0: unpaged
                    if token:
                        params["continue"] = token
                    t0 = time.perf_counter()
                    answer = http.get("/v1/jobs", params=params)
                    pages.append(time.perf_counter() - t0)
                    answer.raise_for_status()
                    body = orjson.loads(answer.content)  # the client shares the cores: parse cheaply
                    ids += [j["id"] for j in body["items"]]
                    token = body["metadata"].get("continue")
                    if not token:
                        break
                cpu, client_cpu = time.process_time() - cpu0, time.thread_time() - client0
                walks.append((len(pages) - first_page, cpu, client_cpu, _redis_cpu(store) - redis_cpu0))
        server.should_exit = True
        thread.join(timeout=10)
        store.close()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=30)
        print(
            f"GET /v1/jobs?limit={args.limit} at {args.jobs} jobs ({args.queued} queued): {len(pages)} pages, "
            f"p50 {pct(pages, 0.5) * 1000:.1f} ms, p99 {pct(pages, 0.99) * 1000:.1f} ms; walk: {len(ids)} ids, "
            f"{len(set(ids))} distinct; load average {os.getloadavg()[0]:.1f}"
        )
        for label, part in (("first walk", walks[:1]), ("later walks", walks[1:])):
            if part:
                n, cpu, client_cpu, redis_cpu = (sum(w[i] for w in part) for i in range(4))
                print(
                    f"  CPU per page, {label}: server {(cpu - client_cpu) / n * 1000:.1f} ms, "
                    f"client {client_cpu / n * 1000:.1f} ms, redis-server {redis_cpu / n * 1000:.1f} ms"
                )


def _redis_cpu(store: Any) -> float:
    """redis-server's CPU seconds so far (user and system, all its threads)."""
    info = store.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


if __name__ == "__main__":
    main()
