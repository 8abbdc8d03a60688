"""Benchmark: the burst benchmark's generated day replayed through kubesim and the real broker (issue 11).

Run: .venv/bin/python -m benchmarks.burst_replay --seed 11 --window 11:00-17:00 --speed 60 \\
         [--drain 3600] [--max-wait 600,1800] [--policies on-prem,burst-now,cheapest,gpufed]
     (Redis at $REDIS_URL; kubesim and Ray are started here; a few minutes per policy on 2 cores)

benchmarks/burst.py decides the same day in a discrete-event simulation of the demo fleet's GPUs. Here
nothing is modelled: per policy a fresh kubesim serves kubesim/fleets/demo.yaml over HTTPS at `--speed`
times real time, and the broker runs in this process as `gpufed serve` runs it (Ray pollers, Job
informers, control loop, HTTP API, Redis under a private prefix) with kubesim's SimClock as its Clock,
so maxWait, predicted waits, run times, reservation expiry and spend are in simulated seconds. The day's
jobs (benchmarks/burst_day.py, same generator and seed) are POSTed to /v1/jobs when the simulated clock
reaches their arrival time, each with its run time as durationSeconds, which kubesim's kubelet honours
(the pod runs that many simulated seconds). No gpuProducts: a job runs on any GPU, as long on each.

Compressed, and said so in the output:
  * only the arrivals in `--window` (simulated hours of the day; the fleet starts empty at its start);
  * the replay ends `--drain` simulated seconds after the window: jobs still queued or running then are
    not finished (their wait is counted as "at least the time queued so far" for p95 purposes: they are
    given the wait they had at the end);
  * at `--speed` x, one real second of broker or kubesim latency is `speed` simulated seconds.

Policies (the broker's own configuration expresses each; none is simulated):
  on-prem      every job is submitted with allowBurst false
  burst-now    the broker before issue 11: maxWaitSeconds 0 and no settings.burst.pools (it cannot see
               the L4 pool's scale-up headroom; only the H200 nodes that are up)
  cheapest     maxWaitSeconds 0 with the L4 pool declared: burst whenever nothing fits on-prem now, to
               the lowest expected cost among the cloud offers that start sooner than on-prem
  gpufed       wait-or-burst at each --max-wait, with the L4 pool declared; with --budget, each tenant
               has that daily budget (settings.burst.tenants.<t>.budget)

Cloud prices as in benchmarks/burst.py: H200 $2.10/GPU-h (the demo fleet's H200 nodes carry the spot
label; kubesim does not interrupt them: their node pool has no interruption rate), L4 $0.85/GPU-h.

Measured per policy, from the broker (events and GET /v1/spend, all in simulated time):
  wait       createdAt -> the first RUNNING event (p50 / p95 over the window's jobs)
  finished   SUCCEEDED by the end of the drain
  cloud      GPU-hours and $ of the runs the broker accounted (GET /v1/spend: gpuHours, spent) plus
             what the cloud runs still going at the end had run up by then (price x GPUs x time since
             their RUNNING event); the broker's own expectation for those (committed) is shown beside it
  prediction for each job that waited and then ran on-prem: its first predictedStart seen (sampled
             every --sample real seconds from the service's queue predictions, as GET /v1/jobs/{id}
             shows it) against its first RUNNING event: |error| p50 / p90 and the bias (> 0: later)
  requeued   why jobs went back to the queue (their events), printed under a row when any did
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

from benchmarks.burst_day import TENANTS, Arrival, generate

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REPO = Path(__file__).resolve().parents[1]
PRICES = {"H200-141GB": 2.10, "L4": 0.85}
L4_POOL = {
    "product": "L4",
    "gpusPerNode": 8,
    "minNodes": 0,
    "maxNodes": 4,
    "provisioningDelaySeconds": 90,
}
HUGE = 10_000_000.0  # seconds: the freshness and lost-cluster checks off (see below)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan


def window_of(text: str) -> tuple[float, float]:
    start, end = text.split("-")

    def sec(hhmm: str) -> float:
        h, _, m = hhmm.partition(":")
        return int(h) * 3600.0 + (int(m) if m else 0) * 60.0

    return sec(start), sec(end)


def arrivals(seed: int, jobs_per_day: float, window: tuple[float, float]) -> list[Arrival]:
    """The window's arrivals, their times shifted to start at 0."""
    lo, hi = window
    return [dataclasses.replace(a, at=a.at - lo) for a in generate(seed, jobs_per_day) if lo <= a.at < hi]


def config_doc(
    sim: Any,
    workdir: Path,
    prefix: str,
    policy: str,
    max_wait: float,
    speed: float,
    budget: float = 0.0,
    hard: bool = False,
) -> dict[str, Any]:
    from broker.app.demo import write_demo_config

    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    doc: dict[str, Any] = yaml.safe_load(
        write_demo_config(workdir, kubeconfigs, REDIS_URL, prefix).read_text()
    )
    doc.pop("auth", None)  # served with insecure_no_auth: auth is not the subject here
    for c in doc["clusters"]:
        if c["name"] == "cloud-burst":
            c["pricePerGpuHour"] = dict(PRICES)
    burst: dict[str, Any] = {"maxWaitSeconds": max_wait}
    if policy != "burst-now":
        burst["pools"] = {"cloud-burst": dict(L4_POOL)}
    if policy == "gpufed" and budget > 0:
        burst["tenants"] = {
            t: {"budget": {"amount": budget, "period": "day", "hard": hard}} for t, _, _ in TENANTS
        }
    doc["settings"].update(
        {
            # The pollers stamp heartbeats with the wall clock, the services read the simulated one,
            # which runs `speed` times faster: a summary would look stale, and its cluster lost, within
            # seconds. No fault is injected here, so both checks are set out of reach.
            "staleAfterSeconds": HUGE,
            "clusterLostSeconds": HUGE,
            # a reservation lives 60 real seconds (simulated: 60 x speed), as long as the pods take to show
            "reservationTtlSeconds": 60.0 * speed,
            # one pass every 0.25 real seconds: 15 simulated seconds at 60 x (benchmarks/burst.py: 30)
            "scheduleIntervalSeconds": 0.25,
            "burst": burst,
        }
    )
    return doc


@dataclasses.dataclass
class Outcome:
    policy: str
    jobs: int
    waits: list[float]  # simulated seconds, per job (unfinished queued jobs: their wait so far)
    never_ran: int
    finished: int
    gpu_hours: float
    spend: float
    committed: float  # the broker's expected cost of the cloud runs still going (GET /v1/spend)
    accrued: float  # what those runs had run up by the end (price x GPUs x time RUNNING so far)
    accrued_gpu_hours: float
    requeued: dict[str, int]
    errors: list[float]  # minutes, actual - predicted start
    on_cloud: int
    real_seconds: float
    sim_seconds: float


def replay(
    day: list[Arrival],
    policy: str,
    max_wait: float,
    speed: float,
    window_seconds: float,
    drain: float,
    sample: float,
    budget: float = 0.0,
    hard: bool = False,
) -> Outcome:
    from broker.app import main as composition
    from broker.config.settings import load_fleet_config
    from kubesim.fleet import load_fleet
    from kubesim.sim import Simulation
    from tests.conftest import free_port

    started_real = time.monotonic()
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with tempfile.TemporaryDirectory() as tmp, Simulation(fleet, Path(tmp) / "kube", speed=speed) as sim:
        prefix = "burstreplay" + uuid.uuid4().hex[:8]
        doc = config_doc(sim, Path(tmp), prefix, policy, max_wait, speed, budget, hard)
        path = Path(tmp) / "clusters.yaml"
        path.write_text(yaml.safe_dump(doc))
        port = free_port()
        with composition.running_broker(
            load_fleet_config(path), port=port, insecure_no_auth=True, clock=sim.clock
        ) as broker:
            http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
            try:
                deadline = time.monotonic() + 180
                while True:
                    items = http.get("/v1/clusters").json()["items"]
                    if items and all(c["health"] == "healthy" for c in items):
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit("the fleet did not become healthy in 180 s")
                    time.sleep(0.5)
                return _drive(
                    day, policy, speed, window_seconds, drain, sample, sim, broker, http, started_real
                )
            finally:
                http.close()
                broker.store_cleanup()


def _drive(
    day: list[Arrival],
    policy: str,
    speed: float,
    window_seconds: float,
    drain: float,
    sample: float,
    sim: Any,
    broker: Any,
    http: httpx.Client,
    started_real: float,
) -> Outcome:
    clock = sim.clock
    t0 = clock.now()
    ids: dict[str, str] = {}  # arrival id -> job id
    predicted: dict[str, float] = {}  # job id -> the first predicted on-prem start seen
    stop = threading.Event()

    from broker.api.views import FleetViews

    views = FleetViews.of(broker.service)

    def sampler() -> None:
        while not stop.is_set():
            try:
                for job_id, p in views.queue_predictions().items():
                    if job_id not in predicted and p.start_at is not None:
                        predicted[job_id] = p.start_at
            except Exception as e:  # a sample missed is a sample missed; say so
                print(f"  (prediction sample failed: {e})")
            stop.wait(sample)

    thread = threading.Thread(target=sampler, name="burst-replay-sampler", daemon=True)
    thread.start()
    try:
        for a in day:
            delay = clock.real_seconds(t0 + a.at - clock.now())
            if delay > 0:
                time.sleep(delay)
            spec = {
                "name": a.id,
                "tenant": a.tenant,
                "gpus": a.gpus,
                "durationSeconds": round(a.run_seconds, 1),
                "allowBurst": a.allow_burst and policy != "on-prem",
            }
            r = http.post("/v1/jobs", json=spec)
            if r.status_code != 201:
                raise SystemExit(f"submitting {a.id}: {r.status_code} {r.text}")
            ids[a.id] = r.json()["id"]
        end = t0 + window_seconds + drain
        while clock.now() < end:
            done = http.get("/v1/jobs", params={"state": ["SUCCEEDED", "FAILED", "CANCELLED"]}).json()
            if len(done["items"]) >= len(day):
                break
            time.sleep(1.0)
    finally:
        stop.set()
        thread.join(timeout=10)
    now = clock.now()
    waits: list[float] = []
    errors: list[float] = []
    finished = never_ran = on_cloud = 0
    accrued = accrued_gpu_hours = 0.0  # cloud runs still going at the end, up to the end
    requeued: dict[str, int] = {}  # why a job went back to the queue -> how many times
    for job_id in ids.values():
        job = http.get(f"/v1/jobs/{job_id}").json()
        events = http.get(f"/v1/jobs/{job_id}/events").json()["items"]
        running = [e["at"] for e in events if e["state"] == "RUNNING"]
        for e in events:
            if e["state"] == "QUEUED" and "requeued" in e["reason"]:
                why = e["reason"].split(":")[0]
                requeued[why] = requeued.get(why, 0) + 1
        if job["state"] == "SUCCEEDED":
            finished += 1
        if job.get("cluster") == "cloud-burst":
            on_cloud += 1
        if running and job["state"] == "RUNNING" and job.get("cluster") == "cloud-burst":
            hours = (now - max(running)) * job["placement"]["unitsPerPod"] * job["placement"]["pods"] / 3600
            accrued_gpu_hours += hours
            accrued += hours * PRICES.get(job["placement"]["product"], 0.0)
        if running:
            first = min(running)
            waits.append(first - job["createdAt"])
            onprem = job.get("cluster") in ("onprem-a", "onprem-b")  # no interruptions: where it ran
            if job_id in predicted and onprem and job["attempt"] <= 1:
                errors.append((first - predicted[job_id]) / 60)
        else:
            never_ran += 1
            waits.append(now - job["createdAt"])
    spend = http.get("/v1/spend").json()["items"]
    return Outcome(
        policy=policy,
        jobs=len(ids),
        waits=waits,
        never_ran=never_ran,
        finished=finished,
        gpu_hours=sum(t["gpuHours"] for t in spend),
        spend=sum(t["spent"] for t in spend),
        committed=sum(t["committed"] for t in spend),
        accrued=accrued,
        accrued_gpu_hours=accrued_gpu_hours,
        requeued=requeued,
        errors=errors,
        on_cloud=on_cloud,
        real_seconds=time.monotonic() - started_real,
        sim_seconds=now - t0,
    )


def des_row(
    day: list[Arrival], policy: str, max_wait: float, seed: int, budget: float = 0.0, hard: bool = False
) -> dict[str, float]:
    """benchmarks/burst.py's discrete-event simulation of the same arrivals (no drain limit)."""
    from benchmarks.burst import Sim

    sim = Sim(
        {"on-prem": "on-prem only", "burst-now": "burst-now", "cheapest": "cheapest", "gpufed": "gpufed"}[
            policy
        ],
        day,
        max_wait,
        budget if policy == "gpufed" else 0.0,
        seed,
        hard,
    )
    sim.run()
    return sim.figures()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--jobs-per-day", type=float, default=300.0)
    ap.add_argument("--window", default="11:00-17:00", help="simulated hours of the day replayed")
    ap.add_argument("--speed", type=float, default=60.0, help="simulated seconds per real second")
    ap.add_argument("--drain", type=float, default=3600.0, help="simulated seconds after the window")
    ap.add_argument("--max-wait", default="600,1800", help="gpufed's maxWaitSeconds, a comma list")
    ap.add_argument("--policies", default="on-prem,burst-now,cheapest,gpufed")
    ap.add_argument(
        "--budget",
        type=float,
        default=0.0,
        help="gpufed only: each tenant's daily budget in $ (0: none); the simulated clock starts at the "
        "real time, so a replay that crosses 00:00 UTC starts a new budget day",
    )
    ap.add_argument("--hard", action="store_true", help="with --budget: the budgets are hard (docs/burst.md)")
    ap.add_argument("--sample", type=float, default=0.5, help="real seconds between prediction samples")
    args = ap.parse_args()
    window = window_of(args.window)
    day = arrivals(args.seed, args.jobs_per_day, window)
    span = window[1] - window[0]
    print(
        f"seed {args.seed}: {len(day)} jobs arriving {args.window} "
        f"({sum(a.gpus * a.run_seconds for a in day) / 3600:.0f} GPU-h asked), replayed at {args.speed:g}x, "
        f"drain {args.drain:g} s after the window (at most {(span + args.drain) / args.speed / 60:.1f} min "
        "real per policy)"
    )
    runs: list[tuple[str, float]] = []
    for p in args.policies.split(","):
        if p == "gpufed":
            runs.extend(("gpufed", float(w)) for w in args.max_wait.split(","))
        else:
            runs.append((p, 0.0))
    print(
        "| policy | p50 wait | p95 wait | never ran | finished | cloud GPU-h | cloud spend | running at end: "
        "run up / expected | "
        "jobs on cloud | pred. error p50 / p90 (bias, n) | real s | DES on the same arrivals: p95 / spend |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for policy, max_wait in runs:
        o = replay(day, policy, max_wait, args.speed, span, args.drain, args.sample, args.budget, args.hard)
        d = des_row(day, policy, max_wait, args.seed, args.budget, args.hard)
        err = (
            f"{pct([abs(e) for e in o.errors], 0.5):.1f} / {pct([abs(e) for e in o.errors], 0.9):.1f} min "
            f"({statistics.mean(o.errors):+.1f}, n={len(o.errors)})"
            if o.errors
            else "-"
        )
        name = f"gpufed, maxWait {max_wait:g} s" if policy == "gpufed" else policy
        if policy == "gpufed" and args.budget > 0:
            name += f", {'hard ' if args.hard else ''}budget ${args.budget:g}/tenant/day"
        print(
            f"| {name} | {pct(o.waits, 0.5) / 60:.1f} min | {pct(o.waits, 0.95) / 60:.1f} min | "
            f"{o.never_ran} | {o.finished}/{o.jobs} | {o.gpu_hours + o.accrued_gpu_hours:.0f} | "
            f"${o.spend + o.accrued:.0f} | ${o.accrued:.0f} / ${o.committed:.0f} | "
            f"{o.on_cloud} | {err} | {o.real_seconds:.0f} | {d['p95']:.1f} min / ${d['spend']:.0f} |",
            flush=True,
        )
        if o.requeued:
            print(f"  ({name}: requeued {o.requeued})", flush=True)


if __name__ == "__main__":
    main()
