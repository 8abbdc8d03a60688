"""Benchmarks of high availability: leader failover time, and rebuilding job records after a Redis loss.

Run: .venv/bin/python -m benchmarks.ha failover [--kills 20] [--lease 10]
     .venv/bin/python -m benchmarks.ha rebuild [--clusters 20] [--jobs 10000]
     (a private redis-server is started here; kubesim too; `failover` starts `gpufed serve` processes)

failover  two broker processes on the demo fleet; each round SIGKILLs the leader and at once submits a
          job to the survivor: the time from the kill until that job is PLACED (the new leader is placing
          jobs). The killed broker is started again (and waited for) before the next round.
rebuild   `jobs` Jobs spread over `clusters` synthetic kubesim clusters, each created as the broker would
          (manifest.build_workload with the recovery annotations; suspended so no pod is scheduled); the store
          starts empty and StoreRecovery.check() rebuilds every record: wall time, records per second.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def wait(pred: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _start(cfg: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "broker.cli",
                "serve",
                "--config",
                str(cfg),
                "--port",
                str(port),
                "--insecure-no-auth",
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _role(port: int) -> str | None:
    try:
        role: str = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=2).json()["role"]
        return role
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def failover(kills: int, lease: float) -> None:
    from adapters import redis_process
    from broker.app.demo import write_demo_config
    from kubesim.fleet import load_fleet
    from kubesim.sim import Simulation

    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with (
        tempfile.TemporaryDirectory() as tmp,
        redis_process.private_redis(Path(tmp)) as redis,
        Simulation(fleet, Path(tmp) / "kube", speed=50.0) as sim,
    ):
        kubeconfigs = {n: sim.kubeconfig_path(n) for n in sim.cluster_names()}
        cfg = write_demo_config(Path(tmp), kubeconfigs, redis.url, "hafail")
        doc = yaml.safe_load(cfg.read_text())
        doc.pop("auth", None)  # the brokers run --insecure-no-auth
        doc["settings"]["leaseSeconds"] = lease
        cfg.write_text(yaml.safe_dump(doc))
        ports = [redis_process.free_port(), redis_process.free_port()]
        procs = {p: _start(cfg, p, Path(tmp) / f"b{p}.log") for p in ports}
        times: list[float] = []
        try:
            for p in ports:
                wait(lambda p=p: _ready(p), 180, f"broker on {p} ready", 0.5)
            for i in range(kills):
                wait(lambda: any(_role(p) == "leader" for p in ports), 60, "a leader")
                leader = next(p for p in ports if _role(p) == "leader")
                survivor = next(p for p in ports if p != leader)
                t0 = time.monotonic()
                procs[leader].send_signal(signal.SIGKILL)
                body = {"name": f"fo-{i}", "gpus": 1, "durationSeconds": 1}
                job = httpx.post(f"http://127.0.0.1:{survivor}/v1/jobs", json=body, timeout=30).json()["id"]

                def placed(job: str = job, survivor: int = survivor) -> bool:
                    r = httpx.get(f"http://127.0.0.1:{survivor}/v1/jobs/{job}", timeout=5)
                    return str(r.json()["state"]) != "QUEUED"

                wait(placed, 120, f"job {job} placed by the new leader", 0.02)
                times.append(time.monotonic() - t0)
                print(f"kill {i + 1}: new leader placing after {times[-1]:.2f} s", flush=True)
                procs[leader].wait(timeout=30)
                procs[leader] = _start(cfg, leader, Path(tmp) / f"b{leader}.log")
                wait(lambda leader=leader: _ready(leader), 180, "the killed broker back", 0.5)
        finally:
            for proc in procs.values():
                proc.kill()
                proc.wait(timeout=30)
        print(
            f"leaseSeconds={lease:g}: {len(times)} kills; kill -> new leader placing: "
            f"p50 {pct(times, 0.5):.2f} s, p99 {pct(times, 0.99):.2f} s, max {max(times):.2f} s"
        )


def rebuild(clusters: int, jobs: int) -> None:
    from adapters import redis_process
    from adapters.kube import KubeGateway
    from adapters.kube_rest import KubeRest
    from adapters.redis_store import RedisStateStore
    from adapters.system_clock import SystemClock
    from broker.core.model import ClusterTraits, JobRequest, Placement
    from broker.ha.recovery import StoreRecovery
    from broker.workload import manifest
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation

    spec = synthetic_fleet(clusters, 1, gpus_per_node=8)
    with (
        tempfile.TemporaryDirectory() as tmp,
        redis_process.private_redis(Path(tmp)) as redis,
        Simulation(spec, Path(tmp) / "kube", speed=1.0) as sim,
    ):
        names = sim.cluster_names()
        gateway = KubeGateway({n: KubeRest.from_kubeconfig(n, sim.kubeconfig_path(n)) for n in names})
        traits = {n: ClusterTraits(name=n) for n in names}
        prefix = "harebuild"

        def create(i: int) -> None:
            cluster = names[i % len(names)]
            job_id = f"j{uuid.uuid4().hex[:12]}"
            request = JobRequest(f"job-{i}", gpus_per_pod=1, duration_seconds=3600)
            where = Placement(cluster, "H100-80GB", "nvidia.com/gpu", 1, pods=1, score=0)
            annotations = manifest.recovery_annotations(request, time.time(), f"key-{i}", prefix)
            m = manifest.build_workload(job_id, 1, request, where, traits[cluster], annotations)
            m.job["spec"]["suspend"] = True  # no pods: the benchmark measures the rebuild, not kubesim
            gateway.create_workload(cluster, m.job, m.companions)

        t0 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(jobs)))
        print(f"created {jobs} Jobs in {len(names)} clusters in {time.monotonic() - t0:.1f} s", flush=True)
        store = RedisStateStore(redis.url, prefix, require_marker=True)
        recovery = StoreRecovery(store, gateway, SystemClock(), traits, prefix)
        t0 = time.monotonic()
        report = recovery.check()
        took = time.monotonic() - t0
        assert report is not None
        print(
            f"rebuilt {report.recovered} job records from {len(report.clusters_listed)} clusters in "
            f"{took:.2f} s ({report.recovered / took:,.0f} records/s)"
        )
        gateway.close()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    f = sub.add_parser("failover")
    f.add_argument("--kills", type=int, default=20)
    f.add_argument("--lease", type=float, default=10.0)
    r = sub.add_parser("rebuild")
    r.add_argument("--clusters", type=int, default=20)
    r.add_argument("--jobs", type=int, default=10000)
    args = parser.parse_args()
    if args.what == "failover":
        failover(args.kills, args.lease)
    else:
        rebuild(args.clusters, args.jobs)


if __name__ == "__main__":
    main()
