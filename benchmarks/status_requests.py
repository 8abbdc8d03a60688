"""Member API requests per running job per minute: following Jobs by GET per pass vs by watch.

N running Jobs (the broker's labels, status active=1 ready=1) spread over C kubesim clusters, followed
for S seconds the way the control loop follows them (broker.controller.service.sync_status: read_workload of every
job every --interval seconds; broker.controller.service.sweep_orphans: list_workloads of every cluster every 30 s),
once through each gateway:
    get     adapters.kube_gateway.KubeGateway: a GET per job per pass (the "before")
    watch   adapters.job_informer.WatchingGateway: one label-selected Job informer per cluster; reads
            from memory
Meanwhile kubesim rewrites one Job's status every --update-every seconds, so the watch carries events.
The figure is the number of requests the member API servers served for Jobs (kubesim's request
counters, read from its admin endpoint: GET /clusters/<name>/requests) between the end of the warm-up
and the end of the run, divided by jobs and minutes. kubesim runs in a child process (no shared GIL).

    .venv/bin/python benchmarks/status_requests.py --jobs 200 --clusters 2 --seconds 60
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

NS = "default"
JOBS = "jobs.batch"
SWEEP_INTERVAL_S = 30.0


def job_name(i: int) -> str:
    return f"bench-{i:05d}-1"


def run_kubesim(args: argparse.Namespace, out_dir: str, conn: Any) -> None:
    """Serve the clusters with N running Jobs; rewrite one Job's status every --update-every s until
    ("stop",) arrives."""
    from broker.workload.manifest import ATTEMPT_LABEL, JOB_ID_LABEL
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation

    fleet = synthetic_fleet(args.clusters, 1)
    with Simulation(fleet, Path(out_dir), speed=0, controllers=False) as sim:
        names = sim.cluster_names()

        def populate() -> None:
            for i in range(args.jobs):
                sim.store(names[i % len(names)]).create(
                    JOBS,
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": job_name(i),
                            "namespace": NS,
                            "labels": {JOB_ID_LABEL: f"bench-{i:05d}", ATTEMPT_LABEL: "1"},
                        },
                        "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}},
                        "status": {"active": 1, "ready": 1},
                    },
                )

        sim.call(populate)
        conn.send(("ready", sim.admin_url, {c: sim.kubeconfig_path(c).as_posix() for c in names}))
        updates = 0
        while not conn.poll(args.update_every):
            i = updates % args.jobs
            cluster = names[i % len(names)]

            def touch(obj: dict[str, Any], n: int = updates) -> None:
                obj["status"]["ready"] = 1
                obj["metadata"].setdefault("annotations", {})["bench/touched"] = str(n)

            sim.call(lambda c=cluster, i=i: sim.store(c).mutate(JOBS, NS, job_name(i), touch))
            updates += 1
        conn.recv()
        conn.send(("stopped", updates))


def job_requests(admin: str, clusters: list[str]) -> tuple[int, dict[str, int]]:
    """Requests for Jobs served so far by all clusters, and their split by verb."""
    by_verb: dict[str, int] = {}
    for c in clusters:
        with urllib.request.urlopen(f"{admin}/clusters/{c}/requests", timeout=10) as resp:
            for row in orjson.loads(resp.read())["requests"]:
                if row["resource"] == JOBS:
                    by_verb[row["verb"]] = by_verb.get(row["verb"], 0) + row["count"]
    return sum(by_verb.values()), by_verb


def follow(mode: str, args: argparse.Namespace, admin: str, kubeconfigs: dict[str, str]) -> dict[str, Any]:
    from adapters.job_informer import WatchingGateway
    from adapters.kube_gateway import KubeGateway

    clusters = sorted(kubeconfigs)
    configs: dict[str, tuple[Path | str, str | None]] = {c: (p, None) for c, p in kubeconfigs.items()}
    jobs = [(clusters[i % len(clusters)], job_name(i)) for i in range(args.jobs)]
    gateway: KubeGateway
    if mode == "watch":
        watching = WatchingGateway.watching(configs, {c: NS for c in clusters})
        watching.start()
        deadline = time.monotonic() + 30
        while not all(watching.synced(c) for c in clusters):
            if time.monotonic() > deadline:
                raise SystemExit("the Job informers did not sync within 30 s")
            time.sleep(0.05)
        gateway = watching
    else:
        gateway = KubeGateway.from_kubeconfigs(configs)

    def one_pass() -> int:
        running = 0
        for cluster, name in jobs:
            status = gateway.read_workload(cluster, NS, name)
            running += status.exists and status.ready > 0
        return running

    try:
        one_pass()  # warm-up: connections open, informers listed
        for c in clusters:
            gateway.list_workloads(c, NS)
        before, before_verbs = job_requests(admin, clusters)
        start = time.monotonic()
        next_sweep = start + SWEEP_INTERVAL_S
        passes = 0
        running = 0
        pass_s = 0.0
        while time.monotonic() - start < args.seconds:
            t0 = time.monotonic()
            running = one_pass()
            if time.monotonic() >= next_sweep:
                next_sweep += SWEEP_INTERVAL_S
                for c in clusters:
                    gateway.list_workloads(c, NS)
            pass_s += time.monotonic() - t0
            passes += 1
            time.sleep(max(0.0, args.interval - (time.monotonic() - t0)))
        elapsed = time.monotonic() - start
        after, after_verbs = job_requests(admin, clusters)
    finally:
        gateway.close()
    made = after - before
    verbs = {v: after_verbs.get(v, 0) - before_verbs.get(v, 0) for v in after_verbs}
    return {
        "mode": mode,
        "seconds": elapsed,
        "passes": passes,
        "pass_ms": 1000 * pass_s / max(passes, 1),
        "running": running,
        "requests": made,
        "verbs": {v: n for v, n in sorted(verbs.items()) if n},
        "per_job_per_min": made / args.jobs / (elapsed / 60),
    }


def measure(
    jobs: int = 200,
    clusters: int = 2,
    seconds: float = 60.0,
    modes: tuple[str, ...] = ("get", "watch"),
    interval: float = 0.5,
    update_every: float = 1.0,
    report: bool = False,
) -> list[dict[str, Any]]:
    """Run the measurement (kubesim in a child process) and return one result per mode; with `report`,
    print each as it comes. benchmarks/placement.py can call this for its requests-per-job figure."""
    args = argparse.Namespace(
        jobs=jobs, clusters=clusters, seconds=seconds, interval=interval, update_every=update_every
    )
    ctx = mp.get_context("spawn")
    parent, child = mp.Pipe()
    proc = ctx.Process(
        target=run_kubesim, args=(args, tempfile.mkdtemp(prefix="gpufed-status-"), child), daemon=True
    )
    proc.start()
    _, admin, kubeconfigs = parent.recv()
    if report:
        print(
            f"{jobs} running Jobs on {clusters} kubesim clusters, followed {seconds:.0f} s each, "
            f"a pass every {interval} s, a sweep every {SWEEP_INTERVAL_S:.0f} s",
            flush=True,
        )
    results = []
    try:
        for mode in modes:
            r = follow(mode, args, admin, kubeconfigs)
            results.append(r)
            if report:
                print(
                    f"{r['mode']:>5}: {r['requests']} Job requests in {r['seconds']:.1f} s "
                    f"({', '.join(f'{v} {n}' for v, n in r['verbs'].items()) or 'none'}); "
                    f"{r['passes']} passes, {r['pass_ms']:.1f} ms each, {r['running']} running seen; "
                    f"**{r['per_job_per_min']:.3f} requests per running job per minute**",
                    flush=True,
                )
    finally:
        parent.send(("stop",))
        _, updates = parent.recv()
        proc.join(10)
    if report:
        print(f"kubesim wrote {updates} Job status updates meanwhile", flush=True)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--clusters", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between passes (the loop's)")
    ap.add_argument("--update-every", type=float, default=1.0, help="seconds between Job status writes")
    ap.add_argument("--modes", default="get,watch")
    args = ap.parse_args()
    measure(
        args.jobs,
        args.clusters,
        args.seconds,
        tuple(args.modes.split(",")),
        args.interval,
        args.update_every,
        report=True,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
