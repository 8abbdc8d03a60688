"""Benchmark: the production path at fleet scale, from submit to every job RUNNING, then a quiet fleet.

Run: .venv/bin/python -m benchmarks.fleet_scale [--clusters 20] [--nodes 50] [--jobs 8000] [--clients 32]
     [--hold SECONDS] (keeps the quiet fleet up after the idle measurement, to profile the broker)
     [--record FILE] (a JSON record of the run: command, commit, date, calibration, results, goals judged)
     (starts its own redis-server, `kubesim serve` and `gpufed serve`; several minutes at full scale)

What runs, each in its own process and (--sessions pods, the default) its own session, so that Linux's
autogroup scheduler gives each a CPU share as Kubernetes gives each pod a cgroup:
    redis-server   private, on a free port (its INFO stats are the broker's traffic and nothing else's)
    kubesim serve  --fleet <generated YAML>: `clusters` clusters of `nodes` nodes x 8 GPUs over HTTPS
    gpufed serve   --config <generated clusters.yaml> with auth ON (a tokens file), its Ray pollers
                   (2 shards), its control loop and leader lease; settings.controllerNice 10 as the chart
                   sets it (--controller-nice)
The load: `clients` keep-alive clients (raw asyncio streams) submit one-GPU jobs (durationSeconds 36000, so they stay
RUNNING), each request with a Bearer token and its own Idempotency-Key.

Prints:
    submit        throughput, p50 / p99 latency (--latencies FILE: each submit, and the p99 of each second)
    cpu, waited   while submitting, each process group's CPU and its time runnable but without a CPU
                  (/proc/PID/task/*/schedstat); and each group's CPU from the last submit until every job runs
    running       seconds from the last submit until every job is RUNNING (counted in Redis's state index,
                  so the watching costs the broker nothing)
    idle          30 s with every job running and nothing changing: CPU % of one core of the broker's
                  whole process tree (benchmarks/proc_tree.py: the broker process, its API processes and
                  every Ray process it started - GCS, raylet, dashboard, agents, monitors, the poller
                  shards - found as its descendants, in its session, or by its Ray session directory),
                  the goal judged on the total, each part beside it; Redis commands/s and KiB/s (INFO
                  stats deltas of total_commands_processed and total_net_input_bytes +
                  total_net_output_bytes: everything, pollers + broker + lease)
    memory        then: the whole tree's memory, PSS (shared pages split, so summed once) and RSS, each
                  part beside it; and the broker process's resident memory now and at most
    list          `GET /v1/jobs?limit=500` p50 / p99, and a walk following metadata.continue (what the
                  endpoint answers when it does not page)
    correctness   jobs missing in the members, jobs created twice (Jobs listed in kubesim by the
                  gpufed.io/job-id label), and a re-sent Idempotency-Key returning its job
    goals         each goal of FLEET_SCALE_GOALS, PASS or FAIL, computed from the figures above; with
                  --record FILE all of it, with the machine's calibration (benchmarks/results_record.py)
                  measured at the start of the run, in a JSON record
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

from adapters.kube_rest import KubeRest
from adapters.redis_process import private_redis
from benchmarks import proc_tree, results_record
from benchmarks.proc_stats import (
    HZ,
    cmdline,
    cpu_ticks,
    cpu_wait_ns,
    descendants,
    memory_mib,
    set_autogroup_nice,
)
from benchmarks.results_record import Goal
from benchmarks.submit_load import read_answer, request_bytes
from broker.workload.manifest import JOB_ID_LABEL
from tests.conftest import free_port

TOKEN = "fleet-scale-benchmark-token-" + uuid.uuid4().hex
PREFIX = "fleetscale"

# Issue 20's goals at 8,000 jobs (docs/benchmarks.md), judged on every run; the idle CPU on the broker's
# whole process tree, Ray's processes included (issue 49).
FLEET_SCALE_GOALS = [
    Goal("submits per second", "submit_per_s", ">=", 1000),
    Goal("submit p99 (ms)", "submit_p99_ms", "<=", 50),
    Goal("every job RUNNING after the last submit (s)", "running_after_s", "<=", 40),
    Goal("idle CPU of the whole tree (% of a core)", "idle_tree_cpu_pct", "<=", 3),
    Goal("idle Redis commands/s", "idle_redis_commands_per_s", "<=", 300),
    Goal("idle Redis KiB/s", "idle_redis_kib_per_s", "<=", 300),
    Goal("GET /v1/jobs?limit=500 p99 (ms)", "list_p99_ms", "<=", 50),
    Goal("submit errors", "submit_errors", "==", 0),
    Goal("jobs missing in the members", "missing", "==", 0),
    Goal("jobs created twice", "created_twice", "==", 0),
    Goal("jobs seen twice in the list walk", "walk_seen_twice", "==", 0),
    Goal("a re-sent Idempotency-Key returns its job", "resent_key_returns_its_job", "==", 1),
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def wait(pred: Any, timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class StateSampler:
    """The jobs per state (Redis's state index) every 5 s: which stage of submit -> RUNNING lags."""

    STATES = ("QUEUED", "PLACED", "ADMITTED", "RUNNING")

    def __init__(self, r: redis.Redis, started: float) -> None:
        self._r = r
        self._started = started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[tuple[float, list[int]]] = []

    def _run(self) -> None:
        while not self._stop.wait(5.0):
            counts = [int(self._r.scard(f"{PREFIX}:jobs:state:{s}")) for s in self.STATES]
            self.samples.append((time.monotonic() - self._started, counts))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def line(self) -> str:
        return " ".join(f"{t:.0f}s:{'/'.join(map(str, c))}" for t, c in self.samples)


def fleet_yaml(clusters: int, nodes: int) -> dict[str, Any]:
    return {
        "clusters": [
            {
                "name": f"sim-{c:03d}",
                "region": "eu-west",
                "tier": "on-prem",
                "nodePools": [
                    {
                        "name": "gpu",
                        "count": nodes,
                        "cpu": "64",
                        "memory": "512Gi",
                        "gpu": {"product": "H100-80GB", "count": 8},
                    }
                ],
            }
            for c in range(clusters)
        ]
    }


def keep_logs(tmp: Path, dest: str) -> None:
    """Copy the run's logs (`tmp`/*.log) to `dest` (--keep-logs), or say where they were."""
    if not dest:
        print(f"logs    {tmp} (removed on exit; --keep-logs DIR keeps them)")
        return
    kept = Path(dest)
    kept.mkdir(parents=True, exist_ok=True)
    for log in tmp.glob("*.log"):
        (kept / log.name).write_bytes(log.read_bytes())
    print(f"logs    copied to {kept}")


def redis_totals(r: redis.Redis) -> tuple[int, int]:
    stats = r.info("stats")
    return int(stats["total_commands_processed"]), int(stats["total_net_input_bytes"]) + int(
        stats["total_net_output_bytes"]
    )


async def submit_all(
    url: str, jobs: int, clients: int, starts: list[float] | None = None
) -> tuple[list[float], list[str], dict[str, str], float]:
    """Closed loop of `clients` keep-alive clients. Returns (latencies, errors, key -> job id, last submit);
    `starts`, when given, gets each latency's start (time.perf_counter), in the same order.
    Raw asyncio streams, not httpx: on this 2-core machine httpx spends about as much CPU a request as the
    broker does (benchmarks/http_load.py), so the figure would be the client's."""
    latencies: list[float] = []
    errors: list[str] = []
    ids: dict[str, str] = {}
    counter = iter(range(jobs))
    last = 0.0
    port = int(url.rsplit(":", 1)[1])

    async def client() -> None:
        nonlocal last
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in counter:
                key = f"fs-{i}-{uuid.uuid4().hex[:8]}"
                body = json.dumps({"name": f"fs-{i}", "gpus": 1, "durationSeconds": 36000}).encode()
                started = time.perf_counter()
                try:
                    writer.write(request_bytes(port, key, body, TOKEN))
                    status, answer = await read_answer(reader)
                except (OSError, asyncio.IncompleteReadError) as e:
                    errors.append(f"{type(e).__name__}: {e}")
                    return
                latencies.append(time.perf_counter() - started)
                if starts is not None:
                    starts.append(started)
                last = time.monotonic()
                if status != 201:
                    errors.append(f"{status} {answer[:200]!r}")
                    continue
                ids[key] = json.loads(answer)["id"]
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, errors, ids, last


def write_latencies(path: Path, starts: list[float], latencies: list[float]) -> None:
    """--latencies: one line per submit, and the p99 of each second of the burst printed."""
    first = min(starts)
    path.write_text(
        "".join(f"{s - first:.4f} {lat * 1000:.2f}\n" for s, lat in zip(starts, latencies, strict=True))
    )
    by_second: dict[int, list[float]] = {}
    for s, lat in zip(starts, latencies, strict=True):
        by_second.setdefault(int(s - first), []).append(lat)
    print(
        "seconds p99 of each second of the burst (ms): "
        + " ".join(f"{pct(v, 0.99) * 1000:.0f}" for _, v in sorted(by_second.items()))
    )


def print_slowlog(r: redis.Redis, over_ms: float) -> None:
    """What Redis's slow log holds of the burst: per command (a script by its SHA), how many took over
    `over_ms` inside Redis and the longest. An O(1) command there says Redis itself was not running."""
    by: dict[str, list[float]] = {}
    for entry in r.slowlog_get(10000):
        command = entry["command"]
        words = (command.decode() if isinstance(command, bytes) else str(command)).split()
        name = (
            " ".join(words[:2])[:30]
            if words and words[0].upper() == "EVALSHA"
            else (words[0] if words else "?")
        )
        by.setdefault(name, []).append(entry["duration"] / 1000)
    worst = sorted(by.items(), key=lambda kv: -max(kv[1]))[:8]
    print(
        f"slowlog over {over_ms:g} ms inside Redis while submitting: "
        + (", ".join(f"{name} x{len(d)} (max {max(d):.1f} ms)" for name, d in worst) or "none")
    )


def list_pages(url: str) -> dict[str, float]:
    """The list figures printed, returned for the record."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
        times: list[float] = []
        first: dict[str, Any] = {}
        for _ in range(20):
            started = time.perf_counter()
            resp = http.get("/v1/jobs", params={"limit": 500})
            times.append(time.perf_counter() - started)
            first = resp.json()
        print(
            f"list    GET /v1/jobs?limit=500 x20: p50 {pct(times, 0.5) * 1000:.1f} ms, "
            f"p99 {pct(times, 0.99) * 1000:.1f} ms, {len(first.get('items', []))} items in the first answer"
        )
        out = {"list_p50_ms": pct(times, 0.5) * 1000, "list_p99_ms": pct(times, 0.99) * 1000}
        token = (first.get("metadata") or {}).get("continue")
        if not token:
            print("list    no metadata.continue in the answer: the endpoint does not page (one answer)")
            return {**out, "walk_seen_twice": 0}
        seen: Counter[str] = Counter(j["id"] for j in first["items"])
        pages, started = 1, time.perf_counter()
        while token:
            page = http.get("/v1/jobs", params={"limit": 500, "continue": token}).json()
            seen.update(j["id"] for j in page["items"])
            token = (page.get("metadata") or {}).get("continue")
            pages += 1
        twice = sum(1 for n in seen.values() if n > 1)
        print(
            f"list    walk: {pages} pages, {len(seen)} jobs, {twice} seen twice, "
            f"{time.perf_counter() - started:.2f} s"
        )
        return {**out, "walk_pages": pages, "walk_jobs": len(seen), "walk_seen_twice": twice}


def member_jobs(kubeconfigs: dict[str, str]) -> Counter[str]:
    """Job id -> how many Jobs carry it, over every member cluster."""
    found: Counter[str] = Counter()
    for name, path in kubeconfigs.items():
        rest = KubeRest.from_kubeconfig(name, path, None)
        try:
            jobs, _ = rest.list_pages("/apis/batch/v1/jobs", selector=[("labelSelector", JOB_ID_LABEL)])
        finally:
            rest.close()
        found.update(str(((j.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)) for j in jobs)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of the idle measurement")
    parser.add_argument("--keep-logs", default="", help="copy the broker's and kubesim's logs here")
    parser.add_argument(
        "--api-processes", type=int, default=0, help="settings.apiProcesses: the HTTP API's own processes"
    )
    parser.add_argument(
        "--controller-nice",
        type=int,
        default=10,
        help="settings.controllerNice (the chart's value, 10): the broker process's threads at this niceness",
    )
    parser.add_argument(
        "--sessions",
        choices=("pods", "shared"),
        default="pods",
        help="pods: redis-server, kubesim and gpufed serve each in a session of its own, so that Linux's "
        "autogroup scheduler gives each a CPU share of its own, as Kubernetes gives each pod a cgroup "
        "(the load generator keeps the benchmark's); shared: the layout before 2026-12-06, redis-server and "
        "kubesim in the benchmark's session beside the load generator, gpufed serve in its own",
    )
    parser.add_argument(
        "--members-nice",
        type=int,
        default=0,
        help="run kubesim (the member clusters, remote machines in a deployment) at this niceness; with "
        "--sessions pods it is its session's (autogroup's) niceness, which orders it against the other "
        "processes' groups, not only inside its own",
    )
    parser.add_argument(
        "--redis-nice",
        type=int,
        default=0,
        help="run the private redis-server at this niceness (negative needs root): is the tail Redis "
        "waiting for a CPU?",
    )
    parser.add_argument(
        "--slowlog-ms",
        type=float,
        default=0.0,
        help="print Redis's slow log (commands over this many ms inside Redis) of the submit burst, by command",
    )
    parser.add_argument(
        "--latencies",
        default="",
        help="write each submit's start (seconds from the first) and latency (ms) to this file, a line each, "
        "and print the p99 of each second of the burst (is the tail steady or a few stalls?)",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="seconds to keep the fleet up after the idle measurement (to profile the quiet broker: "
        "py-spy record -p <the printed pid>)",
    )
    parser.add_argument(
        "--record",
        default="",
        help="write the run's JSON record here: command, commit, date, the machine's calibration measured at "
        "the start, every result and each goal judged (benchmarks/results_record.py)",
    )
    args = parser.parse_args()
    if args.jobs > args.clusters * args.nodes * 8:
        raise SystemExit("--jobs: more than the fleet's GPUs")
    run_started = datetime.now(UTC)
    calibration = results_record.calibrate()  # before the fleet starts: the machine's own speed now
    print(
        f"machine calibration {calibration['best']:.1f} rounds/s (best of {len(calibration['rounds'])}: "
        f"{', '.join(f'{r:.1f}' for r in calibration['rounds'])}), load average {calibration['loadavg'][0]:.1f}"
    )
    results: dict[str, Any] = {}
    # SIGTERM (and SIGINT, which a shell's background job ignores) ends the run through the `finally`
    # below, so kubesim, the broker and its Ray processes, and the private Redis are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bindir = Path(sys.executable).parent
    procs: list[subprocess.Popen[bytes]] = []
    own = args.sessions == "pods"
    with tempfile.TemporaryDirectory() as tmp_name, private_redis(own_session=own) as rs:
        tmp = Path(tmp_name)
        if args.redis_nice:
            os.setpriority(os.PRIO_PROCESS, rs.process.pid, args.redis_nice)
        try:
            (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet_yaml(args.clusters, args.nodes)))
            out = tmp / "kubesim"
            kubesim_log = open(tmp / "kubesim.log", "wb")  # noqa: SIM115
            nice = ["nice", "-n", str(args.members_nice)] if args.members_nice else []
            procs.append(
                subprocess.Popen(
                    [
                        *nice,
                        str(bindir / "kubesim"),
                        "serve",
                        "--fleet",
                        str(tmp / "fleet.yaml"),
                        "--out",
                        str(out),
                    ],
                    stdout=kubesim_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=own,
                )
            )
            if own and args.members_nice:
                set_autogroup_nice(procs[-1].pid, args.members_nice)
            wait((out / "kubesim.json").exists, 300, "kubesim to start")
            described = json.loads((out / "kubesim.json").read_text())
            names = [c["name"] for c in described["clusters"]]
            kubeconfigs = {c["name"]: c["kubeconfig"] for c in described["clusters"]}
            (tmp / "tokens.yaml").write_text(
                yaml.safe_dump([{"name": "bench", "tenant": "bench", "role": "admin", "token": TOKEN}])
            )
            config = {
                "clusters": [{"name": n, "kubeconfig": kubeconfigs[n], "tier": "on-prem"} for n in names],
                "settings": {
                    "redisUrl": rs.url,
                    "redisPrefix": PREFIX,
                    "pollerShards": 2,
                    "apiProcesses": args.api_processes,
                    "controllerNice": args.controller_nice,
                },
                "auth": {"tokensFile": str(tmp / "tokens.yaml")},
            }
            (tmp / "clusters.yaml").write_text(yaml.safe_dump(config))
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            broker_log = open(tmp / "broker.log", "wb")  # noqa: SIM115
            env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
            broker = subprocess.Popen(
                [
                    str(bindir / "gpufed"),
                    "serve",
                    "--config",
                    str(tmp / "clusters.yaml"),
                    "--port",
                    str(port),
                ],
                stdout=broker_log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            procs.append(broker)
            auth = {"Authorization": f"Bearer {TOKEN}"}
            http = httpx.Client(base_url=url, headers=auth, timeout=60)

            def healthy() -> bool:
                try:
                    items = http.get("/v1/clusters").json()["items"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return False
                return len(items) == len(names) and all(c["health"] == "healthy" for c in items)

            wait(healthy, 600, "a healthy fleet", 1.0)
            print(
                f"set-up  {args.clusters} clusters x {args.nodes} nodes x 8 GPUs, {args.jobs} one-GPU jobs, "
                f"{args.clients} keep-alive clients, auth on, an Idempotency-Key per request, "
                f"{args.api_processes} API processes, controllerNice {args.controller_nice}, "
                f"kubesim at nice {args.members_nice}, Redis at nice {args.redis_nice}, "
                f"sessions: {args.sessions}"
            )
            groups: dict[str, Callable[[], set[int]]] = {
                "API": lambda: {
                    p for p in proc_tree.tree(broker.pid) if "broker.app.api_process" in cmdline(p)
                },
                "controller": lambda: {broker.pid},
                "Ray": lambda: {  # every other process of the broker's tree (benchmarks/proc_tree.py)
                    p
                    for p in proc_tree.tree(broker.pid) - {broker.pid}
                    if "broker.app.api_process" not in cmdline(p)
                },
                "kubesim": lambda: {procs[0].pid} | descendants(procs[0].pid),
                "redis": lambda: {rs.process.pid},
                "client": lambda: {os.getpid()},
            }
            if args.slowlog_ms > 0:
                slow = redis.Redis.from_url(rs.url)
                slow.config_set("slowlog-log-slower-than", int(args.slowlog_ms * 1000))
                slow.config_set("slowlog-max-len", 10000)
                slow.slowlog_reset()
            before = {g: {p: cpu_ticks(p) for p in pids()} for g, pids in groups.items()}
            waited = {g: {p: cpu_wait_ns(p) for p in pids()} for g, pids in groups.items()}
            started = time.monotonic()
            sampler = StateSampler(redis.Redis.from_url(rs.url), started)
            sampler.start()
            starts: list[float] = []
            latencies, errors, ids, last = asyncio.run(submit_all(url, args.jobs, args.clients, starts))
            took = last - started
            if args.latencies:
                write_latencies(Path(args.latencies), starts, latencies)
            used = {
                g: sum(cpu_ticks(p) - before[g].get(p, 0) for p in pids()) / HZ / took * 100
                for g, pids in groups.items()
            }
            results.update(
                submitted=len(ids),
                submit_per_s=len(ids) / took,
                submit_p50_ms=pct(latencies, 0.5) * 1000,
                submit_p99_ms=pct(latencies, 0.99) * 1000,
                submit_errors=len(errors),
            )
            print(
                f"submit  {len(ids)} jobs in {took:.1f} s: {len(ids) / took:.0f}/s, "
                f"p50 {pct(latencies, 0.5) * 1000:.1f} ms, p99 {pct(latencies, 0.99) * 1000:.1f} ms, "
                f"{len(errors)} errors" + (f" (first: {errors[0]})" if errors else "")
            )
            queued = {
                g: sum(cpu_wait_ns(p) - waited[g].get(p, 0) for p in pids()) / 1e9 / took * 100
                for g, pids in groups.items()
            }
            print(
                "cpu     while submitting, % of one core: "
                + ", ".join(f"{g} {v:.0f}%" for g, v in used.items())
            )
            print(
                "waited  while submitting, runnable but without a CPU (thread-seconds a second, %): "
                + ", ".join(f"{g} {v:.0f}%" for g, v in queued.items())
            )
            r = redis.Redis.from_url(rs.url)
            if args.slowlog_ms > 0:
                print_slowlog(r, args.slowlog_ms)
            running_key = f"{PREFIX}:jobs:state:RUNNING"
            after = {g: {p: cpu_ticks(p) for p in pids()} for g, pids in groups.items()}
            after_at = time.monotonic()
            wait(lambda: r.scard(running_key) >= len(ids), 900, "every job RUNNING", 0.2)
            results["running_after_s"] = time.monotonic() - last
            print(f"running every job RUNNING {results['running_after_s']:.1f} s after the last submit")
            took_after = time.monotonic() - after_at
            print(
                "cpu     from then until every job RUNNING, % of one core: "
                + ", ".join(
                    f"{g} {sum(cpu_ticks(p) - after[g].get(p, 0) for p in pids()) / HZ / took_after * 100:.0f}%"
                    for g, pids in groups.items()
                )
            )
            sampler.stop()
            print(
                f"states  every 5 s since the first submit (QUEUED/PLACED/ADMITTED/RUNNING): {sampler.line()}"
            )

            time.sleep(3.0)  # the last status writes and settles land
            c0, n0 = redis_totals(r)
            tree0 = proc_tree.sample(broker.pid)
            t0 = time.monotonic()
            time.sleep(args.idle)
            tree1 = proc_tree.sample(broker.pid)
            elapsed = time.monotonic() - t0
            c1, n1 = redis_totals(r)
            idle_cpu = proc_tree.cpu_percent(tree0, tree1, elapsed)
            results.update(
                idle_s=elapsed,
                idle_running=int(r.scard(running_key)),
                idle_tree_cpu_pct=idle_cpu["total"],
                idle_cpu_pct_by_part=idle_cpu,
                idle_processes_by_part=proc_tree.counts(tree1),
                idle_other_processes=proc_tree.others(tree1),
                idle_redis_commands_per_s=(c1 - c0) / elapsed,
                idle_redis_kib_per_s=(n1 - n0) / elapsed / 1024,
            )
            print(
                f"idle    {elapsed:.0f} s, {results['idle_running']} running: the broker's whole process tree "
                f"({len(tree1.parts)} processes: {proc_tree.counts(tree1)}) "
                f"{proc_tree.line(idle_cpu, '%')} of a core; Redis "
                f"{results['idle_redis_commands_per_s']:.0f} commands/s, "
                f"{results['idle_redis_kib_per_s']:.1f} KiB/s"
                + (f"; other: {proc_tree.others(tree1)}" if proc_tree.others(tree1) else "")
            )
            pss, rss_parts = proc_tree.memory(broker.pid)
            rss, peak = memory_mib(broker.pid)
            results.update(
                memory_tree_pss_mib=pss["total"],
                memory_tree_rss_mib=rss_parts["total"],
                memory_pss_mib_by_part=pss,
                memory_rss_mib_by_part=rss_parts,
                memory_broker_rss_mib=rss,
                memory_broker_peak_mib=peak,
            )
            print(
                f"memory  the whole tree: PSS {proc_tree.line(pss, ' MiB', '.0f')}; RSS "
                f"{proc_tree.line(rss_parts, ' MiB', '.0f')}; the broker process {rss:.0f} MiB resident, "
                f"{peak:.0f} MiB at most"
            )

            if args.hold > 0:
                print(
                    f"hold    {args.hold:.0f} s, the fleet up and quiet: gpufed serve pid {broker.pid}",
                    flush=True,
                )
                time.sleep(args.hold)

            results.update(list_pages(url))

            found = member_jobs(kubeconfigs)
            missing = [j for j in ids.values() if found[j] == 0]
            twice = [j for j, n in found.items() if n > 1]
            key, job_id = next(iter(ids.items()))
            again = http.post(
                "/v1/jobs",
                json={"name": "fs-again", "gpus": 1, "durationSeconds": 36000},
                headers={"Idempotency-Key": key},
            )
            same = again.status_code == 200 and again.json()["id"] == job_id
            results.update(missing=len(missing), created_twice=len(twice), resent_key_returns_its_job=same)
            print(
                f"correct {len(missing)} jobs missing in the members, {len(twice)} created twice, "
                f"re-sent Idempotency-Key returns its job: {same} ({again.status_code})"
            )
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(60)
                    except subprocess.TimeoutExpired:
                        p.kill()
            keep_logs(tmp, args.keep_logs)
    record = results_record.build(
        "benchmarks.fleet_scale", sys.argv[1:], results, FLEET_SCALE_GOALS, calibration, run_started
    )
    print(results_record.summary(record))
    if args.record:
        results_record.write(Path(args.record), record)
        print(f"record  {args.record}")


if __name__ == "__main__":
    main()
