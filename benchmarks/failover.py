"""Benchmark: losing a member cluster with 1,000 running jobs on it, at 20 clusters.

Run: .venv/bin/python -m benchmarks.failover [--clusters 20] [--jobs 1000] [--lost-after 10]
     (Redis at $REDIS_URL; kubesim and Ray are started here; several minutes on 2 cores)

kubesim serves `clusters` synthetic clusters (130 nodes x 8 GPUs each) over HTTPS; the broker runs in
this process (Ray pollers, control loop, API) with clusterLostSeconds = --lost-after. The jobs are
placed while every other cluster is held down, so all of them run on sim-000; the others come back,
then sim-000 goes down (connection refused). Measured from that instant:

    detection   per job: until its "cluster sim-000 lost" event (p50 / p99)
    moved       per job: until it is RUNNING in another cluster (p50 / p99 / all)
    duplicates  attempts beyond the second, and jobs with two live attempts once sim-000 is back and its
                fence is lifted (both must be 0)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def wait(pred: Any, timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def main() -> None:
    from broker.app import main as composition
    from broker.config.settings import load_fleet_config
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation
    from tests.conftest import free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--lost-after", type=float, default=10.0)
    args = parser.parse_args()

    nodes = -(-args.jobs // 8) + 5
    spec = synthetic_fleet(args.clusters, nodes, gpus_per_node=8)
    with tempfile.TemporaryDirectory() as tmp, Simulation(spec, Path(tmp), speed=1.0) as sim:
        names = sim.cluster_names()
        lost = names[0]
        doc = {
            "clusters": [
                {"name": n, "kubeconfig": str(sim.kubeconfig_path(n)), "tier": "on-prem"} for n in names
            ],
            "settings": {
                "redisUrl": REDIS_URL,
                "redisPrefix": "failover" + uuid.uuid4().hex[:8],
                "clusterLostSeconds": args.lost_after,
                "pollerShards": 2,
            },
        }
        cfg_path = Path(tmp) / "clusters.yaml"
        cfg_path.write_text(yaml.safe_dump(doc))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with composition.running_broker(  # auth is not the subject here
            load_fleet_config(cfg_path), port=port, insecure_no_auth=True
        ) as broker:
            http = httpx.Client(base_url=url, timeout=60)
            wait(
                lambda: all(c["health"] == "healthy" for c in http.get("/v1/clusters").json()["items"]),
                180,
                "a healthy fleet",
            )
            for n in names[1:]:
                sim.faults(n).down()
            wait(
                lambda: (
                    {c["name"] for c in http.get("/v1/clusters").json()["items"] if c["health"] == "healthy"}
                    == {lost}
                ),
                120,
                f"only {lost} healthy",
            )
            ids = [
                http.post("/v1/jobs", json={"name": f"fo-{i}", "gpus": 1, "durationSeconds": 36000}).json()[
                    "id"
                ]
                for i in range(args.jobs)
            ]

            def running_on(cluster: str) -> int:
                items = http.get("/v1/jobs", params={"state": "RUNNING"}).json()["items"]
                return sum(1 for j in items if j["cluster"] == cluster)

            wait(lambda: running_on(lost) == args.jobs, 600, f"{args.jobs} jobs RUNNING on {lost}", 2.0)
            for n in names[1:]:
                sim.faults(n).clear()
            wait(
                lambda: all(c["health"] == "healthy" for c in http.get("/v1/clusters").json()["items"]),
                180,
                "the others back",
            )

            t0 = time.time()
            sim.faults(lost).down()
            moved: dict[str, float] = {}
            deadline = time.monotonic() + 600
            while len(moved) < args.jobs and time.monotonic() < deadline:
                for j in http.get("/v1/jobs", params={"state": "RUNNING"}).json()["items"]:
                    if j["id"] not in moved and j["cluster"] != lost:
                        moved[j["id"]] = time.time() - t0
                time.sleep(0.5)
            detected = []
            attempts_over = 0
            requeue_reasons: dict[str, int] = {}
            for i in ids:
                events = http.get(f"/v1/jobs/{i}/events").json()["items"]
                lost_at = [e["at"] for e in events if f"cluster {lost} lost" in e["reason"]]
                if lost_at:
                    detected.append(min(lost_at) - t0)
                attempts_over += max(0, http.get(f"/v1/jobs/{i}").json()["attempt"] - 2)
                for e in events:
                    if (
                        e["state"] == "QUEUED"
                        and f"cluster {lost} lost" not in e["reason"]
                        and e["attempt"] >= 2
                    ):
                        phase = "after the fault" if e["at"] >= t0 else "set-up"
                        why = f"{phase}: " + e["reason"].split(":")[0]
                        requeue_reasons[why] = requeue_reasons.get(why, 0) + 1
            sim.faults(lost).clear()
            wait(
                lambda: not any(c["fenced"] for c in http.get("/v1/clusters").json()["items"]),
                300,
                "the fence lifted",
            )
            leftovers = len(broker.gateway.list_workloads(lost, "default"))
            # two live attempts of one job anywhere, once the fence is lifted (must be 0)
            live: dict[str, int] = {}
            for n in names:
                jobs = broker.gateway.list_workloads(n, "default")
                for ref in jobs:
                    status = broker.gateway.read_workload(n, "default", ref.name)
                    if not (status.complete or status.failed_terminal):
                        live[ref.job_id] = live.get(ref.job_id, 0) + 1
            doubled = sum(1 for v in live.values() if v > 1)
            print(
                f"failover: {args.clusters} clusters, {args.jobs} running jobs on {lost}, clusterLostSeconds "
                f"{args.lost_after:g}\n"
                f"  detection (fault -> job's lost event): p50 {pct(detected, 0.5):.1f} s, p99 {pct(detected, 0.99):.1f} s "
                f"({len(detected)} jobs)\n"
                f"  moved (fault -> RUNNING elsewhere): p50 {pct(list(moved.values()), 0.5):.1f} s, "
                f"p99 {pct(list(moved.values()), 0.99):.1f} s, all {max(moved.values(), default=float('nan')):.1f} s "
                f"({len(moved)} of {args.jobs})\n"
                f"  duplicates: {doubled} jobs with two live attempts after the fence; {leftovers} Jobs left on "
                f"{lost} after its fence\n"
                f"  re-placed beyond the second attempt: {attempts_over} ({requeue_reasons or 'none'})"
            )


if __name__ == "__main__":
    main()
