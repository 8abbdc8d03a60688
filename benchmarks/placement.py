"""Benchmark: the placement engine, from the pure core to jobs reaching member clusters.

Run: .venv/bin/python -m benchmarks.placement [all|core|reserve|submit|burst] [--clusters 100] [--audited]
     (an option a sub-command would ignore is refused, exit 2: `--audited` is taken by submit, which then
     runs as submit-audited, and by serve-api; --clusters by core, reserve, the submits and all)
     (needs Redis at $REDIS_URL for reserve/submit/burst; burst starts kubesim itself)

    core     place() over N cluster summaries: decisions/s one at a time, and batched (BatchPlacer over
             10,000 jobs of mixed shapes, each decision assumed into the snapshot)
    reserve  decision + reservation: BatchPlacer decision + compare-and-set reserve on real Redis +
             assume, p50/p99 per job (the summaries come from the FleetCache, not read per job)
    submit   POST /v1/jobs at 32 concurrent clients against a broker API process (Redis store, N
             summaries in Redis so product names are checked against the fleet): submits/s, p50/p99
             (submit-httpx: the same with httpx as the load generator)
    burst    1,000 one-GPU jobs queued at once, then the control loop (real kubesim clusters over HTTPS,
             concurrent dispatch, Jobs followed by watch): Jobs/s reaching the member clusters
    status   member API requests per running job per minute (benchmarks/status_requests.py, watch mode)

Prints one line per figure; docs/benchmarks.md keeps the results with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from benchmarks import results_record
from benchmarks.http_load import encode_request, run_httpx_load, run_load
from benchmarks.results_record import Goal
from broker.cache import reservations
from broker.core.model import (
    ClusterSnapshot,
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    MigCapacity,
    NoFit,
    ProductCapacity,
    Reservation,
    Tier,
)
from broker.core.ports import ClusterGateway
from broker.scheduler.batch_placement import BatchPlacer
from broker.scheduler.placement import PlacementPolicy, place

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PRODUCTS = (("H100-80GB", 81559), ("A100-80GB", 81920), ("H200-141GB", 143771), ("L40S", 46068))
NOW = 1_000_000.0


def fleet(clusters: int, nodes: int = 1000, seed: int = 1) -> list[ClusterSummary]:
    """`clusters` summaries of `nodes` 8-GPU nodes each, with varied fill, products, MIG and tiers."""
    rng = random.Random(seed)
    out = []
    for c in range(clusters):
        product, memory = PRODUCTS[c % len(PRODUCTS)]
        hist = [0] * 9
        for _ in range(nodes):
            hist[rng.choice((0, 0, 1, 2, 4, 6, 8, 8))] += 1
        free = sum(k * n for k, n in enumerate(hist))
        numa = [0] * 5
        for k, n in enumerate(hist):
            numa[min(4, k)] += n
        out.append(
            ClusterSummary(
                cluster=f"c{c:03d}",
                tier=Tier.CLOUD if c % 5 == 4 else Tier.ONPREM,
                health=Health.HEALTHY,
                heartbeat=NOW,
                products=(
                    ProductCapacity(
                        product,
                        memory,
                        8 * nodes,
                        8 * nodes,
                        8 * nodes - free,
                        free,
                        tuple(hist),
                        tuple(numa),
                        nodes,
                    ),
                ),
                mig=(
                    (MigCapacity(product, "1g.10gb", "nvidia.com/mig-1g.10gb", 700, 300, 7),)
                    if product in ("H100-80GB", "A100-80GB")
                    else ()
                ),
                price_per_gpu_hour={product: 2.5} if c % 5 == 4 else {},
            )
        )
    return out


def job_mix(n: int, seed: int = 2) -> list[JobRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(JobRequest(f"mig-{i}", mig_profile="1g.10gb"))
        elif r < 0.3:
            out.append(JobRequest(f"numa-{i}", gpus_per_pod=2, numa_aligned=True))
        else:
            out.append(
                JobRequest(
                    f"job-{i}",
                    gpus_per_pod=rng.choice((1, 2, 4, 8)),
                    pods=rng.choice((1, 1, 1, 2, 4)),
                    gpu_products=rng.choice(((), ("H100-80GB",), ("A100-80GB", "H100-80GB"))),
                    allow_burst=rng.random() < 0.3,
                )
            )
    return out


def pct(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def assume(summary: ClusterSummary, job_id: str, p: Any) -> ClusterSummary:
    r = Reservation(
        job_id, 1, p.cluster, p.product, p.resource_name, p.total_units, NOW, NOW + 60, pods=p.pods
    )
    return reservations.deduct(summary, [r], NOW)


def bench_core(clusters: int) -> None:
    summaries = fleet(clusters)
    traits = {s.cluster: ClusterTraits(s.cluster, tier=s.tier) for s in summaries}
    policy = PlacementPolicy()
    jobs = job_mix(2000)
    start = time.perf_counter()
    for job in jobs:
        place(job, summaries, traits, policy, NOW)
    single = len(jobs) / (time.perf_counter() - start)
    print(f"core place(), one decision at a time: {clusters} clusters, {single:,.0f} decisions/s")

    batch_jobs = job_mix(10_000, seed=3)
    placer = BatchPlacer(summaries, traits, policy, NOW)
    placed = 0
    start = time.perf_counter()
    for i, job in enumerate(batch_jobs):
        decision = placer.place(job)
        if not isinstance(decision, NoFit):
            placed += 1
            current = placer.summary(decision.cluster)
            assert current is not None
            placer.update(assume(current, f"j{i}", decision))
    batched = len(batch_jobs) / (time.perf_counter() - start)
    print(
        f"core batched (BatchPlacer, each decision assumed): {clusters} clusters, {batched:,.0f} decisions/s "
        f"({placed:,} of {len(batch_jobs):,} placed, {placer.evaluations:,} cluster evaluations)"
    )


def _store(prefix: str) -> Any:
    from adapters.redis_store import RedisStateStore

    return RedisStateStore(REDIS_URL, prefix=prefix)


def _cleanup(store: Any) -> None:
    keys = list(store.client.scan_iter(match=f"{store.prefix}:*", count=1000))
    if keys:
        store.client.delete(*keys)


def bench_reserve(clusters: int) -> None:
    from broker.cache.fleet_cache import FleetCache

    store = _store("bench" + uuid.uuid4().hex[:8])
    try:
        summaries = fleet(clusters)
        for s in summaries:
            store.put_summary(s)
        traits = {s.cluster: ClusterTraits(s.cluster, tier=s.tier) for s in summaries}
        policy = PlacementPolicy()
        cache = FleetCache(store, traits)
        start = time.perf_counter()
        cache.refresh()
        cold = time.perf_counter() - start
        placer = BatchPlacer(cache.placeable_all(NOW), traits, policy, NOW)
        samples = []
        for i, job in enumerate(job_mix(2000, seed=4)):
            t0 = time.perf_counter()
            decision = placer.place(job)
            if not isinstance(decision, NoFit):
                state = cache.state(decision.cluster)
                assert state is not None
                r = Reservation(
                    f"j{i}",
                    1,
                    decision.cluster,
                    decision.product,
                    decision.resource_name,
                    decision.total_units,
                    NOW,
                    NOW + 600,
                    pods=decision.pods,
                    owner="bench",
                )
                result = store.reserve(r, NOW, state.summary.version, state.ledger)
                assert result.ok, result
                cache.assume(r, result.ledger)
                fresh = cache.placeable(decision.cluster, NOW)
                assert fresh is not None
                placer.update(fresh)
            samples.append(time.perf_counter() - t0)
        start = time.perf_counter()
        cache.refresh()  # what a pass pays when nothing moved
        idle = time.perf_counter() - start
        print(
            f"decision + reservation (Redis compare-and-set, assumed into the cache): {clusters} clusters, "
            f"p50 {pct(samples, 0.5) * 1000:.2f} ms, p99 {pct(samples, 0.99) * 1000:.2f} ms; "
            f"cache: cold read {cold * 1000:.1f} ms, refresh with nothing changed {idle * 1000:.2f} ms"
        )
    finally:
        _cleanup(store)
        store.close()


# --------------------------------------------------------------------------- submit


BENCH_TOKEN = "bench-token-0123456789abcdef"
SUBMIT_TOTAL = 6000  # measured submits a run (after 200 to warm up)


def serve_api(prefix: str, port: int, clusters: int, audited: bool = False) -> None:
    """The broker's HTTP API over the Redis store (no control loop, no clusters): what a submit costs.
    `audited`: with a bearer token and the audit trail to Redis, as `gpufed serve` runs it."""
    import uvicorn

    from adapters.system_clock import SystemClock
    from broker.api import timeouts
    from broker.api.routes import create_app
    from broker.app.main import settle_startup_heap
    from broker.controller.service import BrokerService

    store = _store(prefix)
    traits = {s.cluster: ClusterTraits(s.cluster) for s in fleet(clusters, nodes=10)}
    # never dispatches (_NoClusters raises if asked): a gateway in name only
    service = BrokerService(store, cast(ClusterGateway, _NoClusters()), SystemClock(), traits)
    if audited:
        from adapters.audit_store import RedisAuditLog
        from broker.api.audit_writer import AuditWriter
        from broker.tenancy.auth import parse_tokens

        log = RedisAuditLog(store.client, prefix)
        tokens = parse_tokens(
            [{"name": "bench", "tenant": "bench", "role": "user", "token": BENCH_TOKEN}], "bench"
        )
        app = create_app(service, service.clock, tokens=tokens, audit=AuditWriter([log]), audit_log=log)
    else:
        app = create_app(service, service.clock)
    settle_startup_heap()  # as `gpufed serve` does once started
    protocol: Any = timeouts.timed_protocol()  # the HTTP protocol `gpufed serve` runs
    if os.environ.get("GPUFED_BENCH_HTTP"):  # another protocol class, "module:attribute", to compare
        module, _, attribute = os.environ["GPUFED_BENCH_HTTP"].partition(":")
        protocol = getattr(importlib.import_module(module), attribute)()
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        http=protocol,
    )


class _NoClusters:
    """The submit benchmark never dispatches: no member cluster is called."""

    def create_workload(self, *a: Any, **k: Any) -> None:
        raise AssertionError("not dispatched in this benchmark")

    delete_workload = read_workload = list_workloads = create_workload


def bench_submit(
    clusters: int, clients: int = 32, total: int = SUBMIT_TOTAL, client: str = "lean", audited: bool = False
) -> dict[str, Any]:
    """`client` "lean" (benchmarks/http_load.run_load) or "httpx" (the same loop through httpx);
    `audited`: a bearer token on every submit and each one recorded in the audit trail (the records in
    Redis are counted after the run, so the label is checked, not assumed). Returns the figures printed."""
    from tests.conftest import free_port  # a free local port, as the tests pick them

    prefix = "bench" + uuid.uuid4().hex[:8]
    store = _store(prefix)
    for s in fleet(clusters, nodes=10):
        store.put_summary(s)
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.placement",
            "serve-api",
            "--prefix",
            prefix,
            "--port",
            str(port),
            "--clusters",
            str(clusters),
            *(["--audited"] if audited else []),
        ],
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz")
        cpu_before = _cpu_seconds(server.pid)
        body = {"name": "bench", "gpus": 1, "gpuProducts": ["H100-80GB"], "durationSeconds": 60}
        if client == "httpx":
            result = asyncio.run(
                run_httpx_load(
                    f"http://127.0.0.1:{port}", "/v1/jobs", body, clients=clients, total=total, expect=201
                )
            )
        else:
            headers = {"Authorization": f"Bearer {BENCH_TOKEN}"} if audited else {}
            request = encode_request("POST", "/v1/jobs", f"127.0.0.1:{port}", body, headers)
            result = asyncio.run(
                run_load("127.0.0.1", port, request, clients=clients, total=total, expect=201)
            )
        rate, latencies, errors = result.rate, result.latencies, result.errors
        cpu_ms = (_cpu_seconds(server.pid) - cpu_before) * 1000 / (total + 200)
        figures: dict[str, Any] = {
            "submit_per_s": rate,
            "submit_p50_ms": pct(latencies, 0.5) * 1000,
            "submit_p99_ms": pct(latencies, 0.99) * 1000,
            "submit_errors": errors,
            "api_cpu_ms_per_submit": cpu_ms,
            "client": client,
            "audited": audited,
        }
        if audited:  # the writer appends in the background, batched: wait for every submit's record
            key = f"{prefix}:audit"
            deadline = time.monotonic() + 60
            while store.client.xlen(key) < total and time.monotonic() < deadline:
                time.sleep(0.2)
            figures["audit_records"] = int(store.client.xlen(key))
            print(f"audit trail: {figures['audit_records']} records in Redis for {total} measured submits")
        print(
            f"POST /v1/jobs, {clients} clients, {clusters} clusters in Redis: {rate:,.0f} submits/s, "
            f"p50 {pct(latencies, 0.5) * 1000:.1f} ms, p99 {pct(latencies, 0.99) * 1000:.1f} ms, "
            f"{errors} errors; broker CPU {cpu_ms:.2f} ms per submit "
            f"({client} load generator on the same 2 cores{'; token + audit trail' if audited else ''})"
        )
        return figures
    finally:
        server.terminate()
        server.wait(timeout=30)
        _cleanup(store)
        store.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_http(url: str, timeout: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


# --------------------------------------------------------------------------- burst


def _serve_kubesim(clusters: int, nodes: int, out_dir: str, conn: Any) -> None:
    """kubesim in a process of its own (as in production: the member clusters are not the broker)."""
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation

    spec = synthetic_fleet(clusters, nodes, gpus_per_node=8)
    with Simulation(spec, Path(out_dir), speed=1.0) as sim:
        conn.send({n: str(sim.kubeconfig_path(n)) for n in sim.cluster_names()})
        conn.recv()  # until told to stop


def bench_burst(jobs: int = 1000) -> None:
    """1,000 one-GPU jobs queued at once on 4 kubesim clusters of 40 8-GPU nodes (room for all of them:
    the figure is the dispatch rate, not the fleet's size), then the control loop with concurrent
    dispatch; Jobs/s counted as they appear in the member clusters. kubesim runs in its own process;
    the summaries' heartbeats are kept fresh by a thread standing in for the pollers."""
    import multiprocessing as mp
    import threading

    from adapters.job_informer import WatchingGateway
    from adapters.kube_rest import KubeRest
    from adapters.system_clock import SystemClock
    from broker.capacity import kube_objects, rollup
    from broker.controller.control_loop import ControlLoop
    from broker.controller.dispatch import ConcurrentDispatcher
    from broker.controller.service import BrokerService

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    with tempfile.TemporaryDirectory() as tmp:
        proc = ctx.Process(target=_serve_kubesim, args=(4, 40, tmp, child), daemon=True)
        proc.start()
        kubeconfigs: dict[str, str] = parent.recv()
        names = sorted(kubeconfigs)
        store = _store("burst" + uuid.uuid4().hex[:8])
        rests = {n: KubeRest.from_kubeconfig(n, kubeconfigs[n]) for n in names}
        gateway = WatchingGateway(rests, dict.fromkeys(names, "default"))  # as the broker runs it
        gateway.start()
        clock = SystemClock()
        traits = {n: ClusterTraits(n, tier=Tier.ONPREM) for n in names}
        summaries = {}
        for n in names:
            nodes = rests[n].request("GET", "/api/v1/nodes")["items"]
            facts = tuple(kube_objects.node_facts(node, (), None) for node in nodes)
            snap = ClusterSnapshot(cluster=n, nodes=facts, observed_at=clock.now())
            summaries[n] = rollup.summarize(snap, traits[n], Health.HEALTHY, clock.now())
        stop = threading.Event()

        def heartbeats() -> None:
            while not stop.is_set():
                for s in summaries.values():
                    store.put_summary(dataclasses.replace(s, heartbeat=clock.now()))
                stop.wait(1.0)

        beat = threading.Thread(target=heartbeats, daemon=True)
        beat.start()
        service = BrokerService(store, gateway, clock, traits, dispatcher=ConcurrentDispatcher(per_cluster=4))
        for i in range(jobs):
            service.submit(JobRequest(f"burst-{i}", gpus_per_pod=1, duration_seconds=3600))
        loop = ControlLoop(service, interval_seconds=0.1, sweep_interval_seconds=3600)

        acknowledged: list[float] = []
        create = gateway.create_workload

        def counted(cluster: str, job: Any, companions: Any = ()) -> None:
            create(cluster, job, companions)
            acknowledged.append(time.perf_counter())  # the member API server answered 201

        gateway.create_workload = counted  # type: ignore[method-assign]

        def created() -> int:
            return len(acknowledged)

        start = time.perf_counter()
        cpu0 = time.process_time()
        loop.start()
        try:
            count = 0
            while count < jobs and time.perf_counter() - start < 180:
                time.sleep(0.25)
                count = created()
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu0
        finally:
            loop.stop()
            service.dispatcher.close()
            stop.set()
            beat.join()
            parent.send("stop")
            proc.join(timeout=30)
        print(
            f"burst: {count} of {jobs} Jobs created in {len(names)} kubesim clusters in {elapsed:.1f} s: "
            f"{count / elapsed:,.0f} jobs/s reaching member clusters (kubesim in its own process); "
            f"broker CPU {cpu * 1000 / max(1, count):.1f} ms per job"
        )
        gateway.close()
        _cleanup(store)
        store.close()


def bench_status(_clusters: int) -> None:
    """Member API requests per running job per minute while the broker follows 200 running jobs."""
    from benchmarks.status_requests import measure

    for r in measure(jobs=200, clusters=2, seconds=60.0, modes=("watch",)):
        print(
            f"status: {r['running']} running jobs followed by watch for {r['seconds']:.0f} s: "
            f"{r['per_job_per_min']:.3f} member API requests per running job per minute"
        )


BENCHES: dict[str, Callable[[int], object]] = {
    "core": bench_core,
    "reserve": bench_reserve,
    "submit": bench_submit,
    "submit-httpx": lambda clusters: bench_submit(clusters, client="httpx"),
    "submit-audited": lambda clusters: bench_submit(clusters, audited=True),
    "burst": lambda _clusters: bench_burst(),
    "status": bench_status,
}


# Issue 8's goals for the API alone (docs/benchmarks.md, "The placement engine"); audited, every measured
# submit must be in the audit trail too.
SUBMIT_GOALS = [
    Goal("submits per second", "submit_per_s", ">=", 1000),
    Goal("submit p99 (ms)", "submit_p99_ms", "<=", 50),
    Goal("submit errors", "submit_errors", "==", 0),
]


def record_submit(what: str, clusters: int, audited: bool, path: Path) -> None:
    """One submit benchmark with its record (--record): the calibration first, then the run."""
    started = datetime.now(UTC)
    calibration = results_record.calibrate()
    figures = bench_submit(clusters, client="httpx" if what == "submit-httpx" else "lean", audited=audited)
    goals = [*SUBMIT_GOALS]
    if audited:
        goals.append(Goal("every measured submit in the audit trail", "audit_records", ">=", SUBMIT_TOTAL))
    record = results_record.build("benchmarks.placement", sys.argv[1:], figures, goals, calibration, started)
    print(results_record.summary(record))
    results_record.write(path, record)
    print(f"record  {path}")


# The options each sub-command reads; one given to a sub-command that would ignore it is refused (issue
# 49: `submit --audited` once ran without a token or the audit trail, and its figures were labelled as if
# with them).
TAKES: dict[str, frozenset[str]] = {
    "core": frozenset({"clusters"}),
    "reserve": frozenset({"clusters"}),
    "submit": frozenset({"clusters", "audited", "record"}),
    "submit-httpx": frozenset({"clusters", "record"}),
    "submit-audited": frozenset({"clusters", "record"}),
    "burst": frozenset(),
    "status": frozenset(),
    "all": frozenset({"clusters"}),
    "serve-api": frozenset({"clusters", "prefix", "port", "audited"}),
}


def refused(what: str, given: set[str]) -> str:
    """Why `what` refuses the options `given` (those it would ignore), or "" when it takes them all."""
    ignored = sorted(given - TAKES[what])
    if not ignored:
        return ""
    flags = ", ".join(f"--{name}" for name in ignored)
    hint = (
        " (with a token and the audit trail: submit --audited, or submit-audited)"
        if "audited" in ignored
        else ""
    )
    return f"{what} ignores {flags}: refused rather than run under a label that is not true{hint}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=[*BENCHES, "all", "serve-api"])
    parser.add_argument("--clusters", type=int, default=None, help="cluster summaries (default 100)")
    parser.add_argument("--prefix", default=None, help="serve-api: the Redis key prefix")
    parser.add_argument("--port", type=int, default=None, help="serve-api: the port")
    parser.add_argument(
        "--audited",
        action="store_true",
        help="submit, serve-api: a bearer token on every submit and each one in the audit trail",
    )
    parser.add_argument(
        "--record",
        default=None,
        help="submit, submit-httpx, submit-audited: write the run's JSON record here (command, commit, date, "
        "the machine's calibration, the figures, each goal judged: benchmarks/results_record.py)",
    )
    args = parser.parse_args()
    given = {name for name in ("clusters", "prefix", "port", "record") if getattr(args, name) is not None}
    if args.audited:
        given.add("audited")
    if why := refused(args.what, given):
        parser.error(why)
    clusters = 100 if args.clusters is None else args.clusters
    if args.what == "serve-api":
        serve_api(args.prefix or "bench", args.port or 0, clusters, audited=args.audited)
        return
    if args.record is not None:
        record_submit(args.what, clusters, args.audited or args.what == "submit-audited", Path(args.record))
        return
    if args.what == "submit" and args.audited:
        bench_submit(clusters, audited=True)
        return
    for name, fn in BENCHES.items():
        if args.what in (name, "all"):
            fn(clusters)


if __name__ == "__main__":
    main()
