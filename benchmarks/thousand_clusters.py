"""Benchmark: `gpufed serve` holding a fleet of 1,000 member clusters (issue 24), on the production path.

Run: .venv/bin/python -m benchmarks.thousand_clusters [--clusters 1000] [--nodes 10] [--kubesims 2]
         [--shards 0 (auto)] [--jobs 2000] [--clients 16] [--lost-seconds 10 (clusterLostSeconds)]
         [--churn R --fresh-seconds 60] [--backlog]
     (starts its own redis-server, `--kubesims` `kubesim serve` processes and `gpufed serve`; minutes)

What runs, each in its own process, as deployed:
    redis-server   private, on a free port
    kubesim serve  x `kubesims`, each serving a slice of the fleet (`clusters` synthetic clusters of `nodes`
                   nodes x 8 H100 over HTTPS, one TLS listener and CA per cluster, controllers running)
    gpufed serve   --config <generated clusters.yaml> with auth ON, `shards` Ray poller shards (list+watch
                   per cluster), the control loop and the leader lease
Prints:
    kubesim       seconds until every kubesim process serves its slice (not the broker's figure)
    cold start    seconds from `gpufed serve` launched to every one of the clusters HEALTHY in /v1/clusters
                  (the broker's start, Ray's start, the shards' first list of every cluster)
    memory        RSS of the broker process and of its Ray processes (shards, raylet, GCS), and per cluster
    idle          `idle` (30) s, nothing changing: broker CPU and Ray processes' CPU (% of one core), Redis
                  commands/s and KiB/s (the pollers' heartbeats and node tables of 1,000 clusters)
    summary age   then (now - heartbeat) over every cluster's summary in Redis, sampled each second for
                  `idle` seconds, p50/p99
    ready         when /readyz first answered 200 (polled from launch), and each check's last reason
    placement     `jobs` one-GPU jobs submitted by `clients` keep-alive clients, then the rate at which
                  the control loop places them (QUEUED -> created in a member) at 1,000 clusters, and the
                  seconds until every job is RUNNING
    decide        from the fleet's event stream: first placement decisions (attempt 1 PLACED) a second at
                  the busiest second, submit -> decision p50/p99, and jobs placed again (a failed create, a move);
                  with --backlog (the controller stopped while the jobs arrive), how fast it decides the queue
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
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
import yaml

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from benchmarks import capacity_freshness, proc_tree
from benchmarks.fleet_scale import (
    TOKEN,
    fleet_yaml,
    keep_logs,
    pct,
    redis_totals,
    submit_all,
)
from benchmarks.proc_stats import HZ, cmdline, cpu_ticks, descendants
from broker.config.sizing import poller_shards_for
from broker.core.model import JobState
from tests.conftest import free_port

PREFIX = "thousand"


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def threads(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_groups(broker: int, kubesims: list[int]) -> dict[str, list[int]]:
    """The broker process, its poller shards (Ray workers under it), and the kubesim processes."""
    shards = [p for p in descendants(broker) if "PollerShard" in cmdline(p)]
    return {"broker": [broker], "shards": shards, "kubesim": kubesims}


def wait_for(pred: Any, timeout: float, what: str, interval: float = 0.5) -> float:
    started = time.monotonic()
    while not pred():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - started


def summary_ages(r: redis.Redis, names: list[str]) -> list[float]:
    """now - heartbeat of every cluster's summary in Redis (seconds): the `heartbeat` field that a
    heartbeat-only write moves, else (a summary from an older poller) the JSON's. One HMGET per cluster."""
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.hmget(f"{PREFIX}:summary:{name}", "heartbeat", "json")
    now = time.time()
    ages: list[float] = []
    for beat, blob in pipe.execute():
        if beat is not None:
            ages.append(now - float(beat))
        elif blob:
            ages.append(now - float(orjson.loads(blob).get("heartbeat", 0.0)))
    return ages


def placement_decisions(url: str, backlog_since: float | None = None) -> str:
    """From the fleet's event stream: each job's first placement decision (its attempt-1 PLACED event)
    after its submit (its QUEUED event): how many decisions a second at the busiest second, and the
    submit -> decision lag. Later placements (attempt >= 2: a failed create, a move) are counted apart.
    With `backlog_since` (when the controller was let go on a queue of every job): the decisions a
    second from then to the last decision."""
    store = RedisStateStore(url, prefix=PREFIX)
    submitted: dict[str, float] = {}
    decided: dict[str, float] = {}
    moves = 0
    after = "0-0"
    try:
        while rows := store.read_events(None, after=after, count=5000):
            after = rows[-1][0]
            for _, e in rows:
                if e.state is JobState.QUEUED and e.job_id not in submitted:
                    submitted[e.job_id] = e.at
                elif e.state is JobState.PLACED and e.attempt == 1 and e.job_id not in decided:
                    decided[e.job_id] = e.at
                elif e.state is JobState.PLACED:
                    moves += 1
    finally:
        store.close()
    lags = [decided[j] - submitted[j] for j in decided if j in submitted]
    per_second: dict[int, int] = {}
    for at in decided.values():
        per_second[int(at)] = per_second.get(int(at), 0) + 1
    span = max(decided.values()) - min(decided.values()) if decided else 0.0
    backlog = ""
    if backlog_since is not None and decided:
        drained = max(decided.values()) - backlog_since
        backlog = (
            f"; the backlog of {len(decided)} decided in {drained:.2f} s: {len(decided) / drained:.0f}/s"
        )
    return (
        f"{len(decided)} first placements in {span:.1f} s, busiest second {max(per_second.values(), default=0)}; "
        f"submit -> placed p50 {pct(lags, 0.5) * 1000:.0f} ms, p99 {pct(lags, 0.99) * 1000:.0f} ms; "
        f"{moves} placed again (after a failed create or a move)" + backlog
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--kubesims", type=int, default=2, help="kubesim processes, each serving a slice")
    parser.add_argument(
        "--shards", type=int, default=0, help="the broker's pollerShards (0: unset, sized from the fleet)"
    )
    parser.add_argument(
        "--bookmark-seconds",
        type=float,
        default=60.0,
        help="kubesim's BOOKMARK interval (kube-apiserver: ~60)",
    )
    parser.add_argument(
        "--lost-seconds",
        type=float,
        default=10.0,
        help="settings.clusterLostSeconds (the probe interval is a fifth of it; docs/operations.md, sizing)",
    )
    parser.add_argument(
        "--churn",
        type=float,
        default=0.0,
        help="pod events/s of background churn across the fleet (kubesim --churn-rate, split over the "
        "kubesims): the idle line then measures the fleet under churn, and a `fresh` line times marker "
        "changes -> Redis (benchmarks.capacity_freshness)",
    )
    parser.add_argument("--fresh-seconds", type=float, default=60.0, help="with --churn: how long to sample")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="the API in a process of its own (apiProcesses 1); the controller's process is stopped "
        "(SIGSTOP) while the jobs are submitted and let go (SIGCONT) once all are QUEUED: the `decide` line "
        "then says how fast the controller places a queue of them, not how fast they arrive",
    )
    parser.add_argument("--keep-logs", default="", help="copy the broker's and kubesim's logs here")
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="seconds to keep the fleet up after the run (to profile it: py-spy record -p <a printed pid>)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bindir = Path(sys.executable).parent
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp_name, private_redis() as rs:
        tmp = Path(tmp_name)
        try:
            fleet = fleet_yaml(args.clusters, args.nodes)["clusters"]
            started = time.monotonic()
            outs: list[Path] = []
            for part in range(args.kubesims):
                (tmp / f"fleet-{part}.yaml").write_text(
                    yaml.safe_dump({"clusters": fleet[part :: args.kubesims]})
                )
                out = tmp / f"kubesim-{part}"
                outs.append(out)
                log = open(tmp / f"kubesim-{part}.log", "wb")  # noqa: SIM115
                procs.append(
                    subprocess.Popen(
                        [
                            str(bindir / "kubesim"),
                            "serve",
                            "--fleet",
                            str(tmp / f"fleet-{part}.yaml"),
                            "--out",
                            str(out),
                            "--bookmark-seconds",
                            str(args.bookmark_seconds),
                            "--churn-rate",
                            str(args.churn / args.kubesims),
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            wait_for(lambda: all((o / "kubesim.json").exists() for o in outs), 900, "kubesim to start", 1.0)
            print(
                f"kubesim {args.clusters} clusters x {args.nodes} nodes x 8 GPUs in {args.kubesims} processes: "
                f"serving after {time.monotonic() - started:.1f} s"
            )
            kubeconfigs: dict[str, str] = {}
            for o in outs:
                for c in json.loads((o / "kubesim.json").read_text())["clusters"]:
                    kubeconfigs[c["name"]] = c["kubeconfig"]
            names = sorted(kubeconfigs)
            (tmp / "tokens.yaml").write_text(
                yaml.safe_dump([{"name": "bench", "tenant": "bench", "role": "admin", "token": TOKEN}])
            )
            settings: dict[str, Any] = {
                "redisUrl": rs.url,
                "redisPrefix": PREFIX,
                "clusterLostSeconds": args.lost_seconds,
            }
            if args.shards:
                settings["pollerShards"] = args.shards
            if args.backlog:
                settings["apiProcesses"] = 1
            shards = poller_shards_for(len(names), args.shards or None)
            config = {
                "clusters": [{"name": n, "kubeconfig": kubeconfigs[n], "tier": "on-prem"} for n in names],
                "settings": settings,
                "auth": {"tokensFile": str(tmp / "tokens.yaml")},
            }
            (tmp / "clusters.yaml").write_text(yaml.safe_dump(config))
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
            broker_log = open(tmp / "broker.log", "wb")  # noqa: SIM115
            launched = time.monotonic()
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
            http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            readiness_http = httpx.Client(base_url=url, timeout=10)  # its own: read from a thread of its own

            progress = {"next": time.monotonic() + 30.0, "at": time.monotonic()}
            ticks: dict[int, int] = {}

            def where_it_stands(counts: dict[str, int]) -> str:
                """Clusters per health, then threads and % of a core (since the last line) per group."""
                now, elapsed = time.monotonic(), max(0.1, time.monotonic() - progress["at"])
                progress["at"] = now
                parts = [f"{now - launched:.0f} s: {counts}"]
                kubesims = [p.pid for p in procs[:-1]]
                for group, pids in process_groups(broker.pid, kubesims).items():
                    used = sum(cpu_ticks(p) - ticks.get(p, 0) for p in pids) / HZ / elapsed * 100
                    ticks.update({p: cpu_ticks(p) for p in pids})
                    parts.append(
                        f"{group} ({len(pids)}): {sum(threads(p) for p in pids)} threads, {used:.0f}%"
                    )
                return "; ".join(parts)

            ready_at: list[float] = []  # when /readyz first said 200, as a load balancer would see it
            not_ready: dict[str, tuple[float, str]] = {}  # each check's last 503 reason, and when

            def ready() -> bool:
                if not ready_at:
                    try:
                        answer = readiness_http.get("/readyz")
                        if answer.status_code == 200:
                            ready_at.append(time.monotonic())
                        else:
                            for check, why in answer.json().get("reasons", {}).items():
                                not_ready[check] = (time.monotonic() - launched, str(why)[:160])
                    except (httpx.HTTPError, ValueError, AttributeError):
                        pass
                return bool(ready_at)

            def watch_readiness() -> None:  # twice a second from launch until the first 200
                while not ready() and broker.poll() is None:
                    time.sleep(0.5)

            threading.Thread(target=watch_readiness, name="readyz", daemon=True).start()

            def healthy() -> bool:
                try:
                    items = http.get("/v1/clusters").json()["items"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return False
                if time.monotonic() >= progress["next"]:  # where a slow cold start stands, every 30 s
                    progress["next"] += 30.0
                    counts: dict[str, int] = {}
                    for c in items:
                        counts[c["health"]] = counts.get(c["health"], 0) + 1
                    print(f"  {where_it_stands(counts)}", flush=True)
                return len(items) == len(names) and all(c["health"] == "healthy" for c in items)

            wait_for(healthy, 900, "every cluster healthy", 1.0)
            print(
                f"cold    gpufed serve launched -> all {len(names)} clusters healthy: "
                f"{time.monotonic() - launched:.1f} s ({shards} poller shards)"
            )
            time.sleep(5.0)
            # every other process of the broker's tree (benchmarks/proc_tree.py): Ray's, found also when
            # daemonised out of it, and its API processes and reaper (issue 49)
            ray_pids = proc_tree.tree(broker.pid) - {broker.pid}
            broker_rss = rss_kib(broker.pid)
            ray_rss = sum(rss_kib(p) for p in ray_pids)
            print(
                f"memory  the whole tree {(broker_rss + ray_rss) / 1024:.0f} MiB resident: broker "
                f"{broker_rss / 1024:.0f} MiB, Ray and the rest of its tree ({len(ray_pids)} processes) "
                f"{ray_rss / 1024:.0f} MiB: {(broker_rss + ray_rss) / len(names):.0f} KiB per cluster in all"
            )
            r = redis.Redis.from_url(rs.url)
            b0 = cpu_ticks(broker.pid)
            members = [p.pid for p in procs[:-1]]
            k0 = sum(cpu_ticks(p) for p in members)
            ray0 = {p: cpu_ticks(p) for p in ray_pids}
            c0, n0 = redis_totals(r)
            t0 = time.monotonic()
            time.sleep(args.idle)  # nothing else reads Redis meanwhile: its figures are the fleet's
            elapsed = time.monotonic() - t0
            c1, n1 = redis_totals(r)
            b1 = cpu_ticks(broker.pid)
            ray1 = sum(cpu_ticks(p) - ray0[p] for p in ray_pids if cpu_ticks(p))
            k1 = sum(cpu_ticks(p) for p in members)
            print(
                (f"churn   {args.churn:g} pod events/s, " if args.churn else "idle    ")
                + f"{elapsed:.0f} s: the broker's whole tree {(b1 - b0 + ray1) / HZ / elapsed * 100:.1f}% of a "
                f"core (broker {(b1 - b0) / HZ / elapsed * 100:.1f}%, Ray and the rest of its tree "
                f"{ray1 / HZ / elapsed * 100:.1f}%), kubesim (the members) {(k1 - k0) / HZ / elapsed * 100:.1f}%; "
                f"Redis {(c1 - c0) / elapsed:.0f} commands/s, "
                f"{(n1 - n0) / elapsed / 1024:.1f} KiB/s"
            )
            ages: list[float] = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.idle:  # then the summaries' ages, once a second
                ages.extend(summary_ages(r, names))
                time.sleep(1.0)
            print(
                f"age     summary age (now - heartbeat) over {len(ages)} samples: p50 {pct(ages, 0.5):.2f} s, "
                f"p99 {pct(ages, 0.99):.2f} s, max {max(ages):.2f} s"
            )
            if args.churn:
                fresh = capacity_freshness.sample(rs.url, PREFIX, kubeconfigs, args.fresh_seconds)
                print(
                    f"fresh   under {args.churn:g} pod events/s: a GPU node cordoned or uncordoned in a member "
                    f"-> its summary in Redis, {len(fresh.latencies)} changes: "
                    f"p50 {pct(fresh.latencies, 0.5):.2f} s, p99 {pct(fresh.latencies, 0.99):.2f} s, "
                    f"max {max(fresh.latencies, default=0.0):.2f} s; {fresh.missed} not seen in "
                    f"{capacity_freshness.GIVE_UP_SECONDS:g} s, {fresh.skipped} members skipped, "
                    f"{fresh.failed_calls} sampler calls to a member failed"
                )
            if args.jobs:
                # As a load balancer would: traffic once /readyz says 200 (the store initialised, which on a
                # first start lists every workload kind in every member); polled from launch on
                wait_for(ready, 900, "the broker ready", 1.0)
                print(f"ready   /readyz first 200 {ready_at[0] - launched:.1f} s after launch")
                for check, (at, why) in sorted(not_ready.items()):
                    print(f"          {check}: last not ready {at:.0f} s after launch: {why}")
                submit_started = time.monotonic()
                if args.backlog:  # under the lease (leaseSeconds 10): the submits take a few seconds
                    os.kill(broker.pid, signal.SIGSTOP)
                try:
                    latencies, errors, ids, last = asyncio.run(submit_all(url, args.jobs, args.clients))
                finally:
                    backlog_since = time.time() if args.backlog else None
                    if args.backlog:
                        os.kill(broker.pid, signal.SIGCONT)
                print(
                    f"submit  {len(ids)} jobs, p50 {pct(latencies, 0.5) * 1000:.1f} ms, "
                    f"p99 {pct(latencies, 0.99) * 1000:.1f} ms, {len(errors)} errors"
                    + (f" (first: {errors[0]})" if errors else "")
                )
                queued = f"{PREFIX}:jobs:state:QUEUED"
                first = time.monotonic()
                wait_for(lambda: r.scard(queued) == 0, 900, "every job placed", 0.1)
                placed_in = time.monotonic() - first
                placed_rate = len(ids) / max(1e-9, time.monotonic() - submit_started)
                running = f"{PREFIX}:jobs:state:RUNNING"
                wait_for(lambda: r.scard(running) >= len(ids), 900, "every job RUNNING", 0.2)
                print(
                    f"place   the last submit -> no job QUEUED: {placed_in:.1f} s; every job RUNNING "
                    f"{time.monotonic() - last:.1f} s after the last submit; {placed_rate:.0f} placed/s from the "
                    "first submit (bounded by the submit rate: jobs are placed as they arrive)"
                )
                print(f"decide  {placement_decisions(rs.url, backlog_since)}")
            if args.hold:
                print(
                    f"hold    {args.hold:.0f} s: broker pid {broker.pid}, kubesim pids "
                    f"{[p.pid for p in procs[:-1]]}, Ray pids {descendants(broker.pid)}",
                    flush=True,
                )
                time.sleep(args.hold)
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    try:
                        if p is procs[-1]:
                            os.killpg(p.pid, signal.SIGTERM)
                        else:
                            p.terminate()
                        p.wait(timeout=60)
                    except (subprocess.TimeoutExpired, ProcessLookupError):
                        p.kill()
            keep_logs(tmp, args.keep_logs)


if __name__ == "__main__":
    main()
