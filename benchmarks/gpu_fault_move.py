"""Benchmark: a GPU fault to the job moved (issue 44), on kubesim's demo fleet with the broker as served.

Run: .venv/bin/python -m benchmarks.gpu_fault_move [--rounds 3] [--interval 10] [--via pod-proxy|prometheus]
     (a private redis-server, kubesim and Ray are started here; ~1 minute per round on 2 cores)

kubesim runs at speed 1 (simulated seconds are wall seconds, so its dcgm-exporter fails the pod on the
faulted GPU `failAfterSeconds` = 5 s after the XID, as a real one dies within seconds). Each round: a
checkpointing 8-GPU A100 job runs on onprem-a (30 s grace, a 5 s save, a periodic checkpoint every 20 s);
once it has reported a checkpoint, `XID 79` is injected on GPU 3 of its node. Measured from the XID:

    detected   until /v1/fleet?nodes=true shows that GPU unhealthy with XID 79 (polled every 0.2 s)
    moved      until the job's next attempt is RUNNING (on another node, from its checkpoint)
    how        which path moved it: "moved off" (the broker stopped it) or "pod died" (the pod failed first
               and was requeued, not FAILED)
Then the GPU is cleared and the job cancelled before the next round. gpuHealth.intervalSeconds is --interval
(the default setting is 10); the liveness probe (every 2 s) paces the reads.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]


def wait(pred: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def main() -> None:
    from adapters.redis_process import private_redis
    from broker.app import main as composition
    from broker.app.demo import read_demo_tokens, write_demo_config
    from broker.config.settings import load_fleet_config
    from broker.workload.manifest import JOB_ID_LABEL, job_id_label_value
    from kubesim.controllers.checkpoints import ANN_CHECKPOINT_EVERY, ANN_CHECKPOINT_SECONDS
    from kubesim.fleet import load_fleet
    from kubesim.sim import Simulation
    from tests.conftest import free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=10.0, help="gpuHealth.intervalSeconds")
    parser.add_argument("--via", choices=["pod-proxy", "prometheus"], default="pod-proxy")
    args = parser.parse_args()
    if args.via == "prometheus":
        raise SystemExit("--via prometheus: run tests/integration/test_gpu_fault_moves.py; not measured here")

    with tempfile.TemporaryDirectory() as tmp, private_redis(Path(tmp)) as redis:
        work = Path(tmp)
        fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
        with Simulation(fleet, work / "sim", speed=1.0) as sim:
            kubeconfigs = {n: sim.kubeconfig_path(n) for n in sim.cluster_names()}
            cfg = write_demo_config(work, kubeconfigs, redis.url, "gpubench" + uuid.uuid4().hex[:6])
            doc = yaml.safe_load(cfg.read_text())
            for c in doc["clusters"]:
                c["gpuHealth"] = {"intervalSeconds": args.interval, "recoverAfterSeconds": 5}
            cfg.write_text(yaml.safe_dump(doc, sort_keys=False))
            auth = {"Authorization": "Bearer " + read_demo_tokens(work)["admin"]}
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            with composition.running_broker(load_fleet_config(cfg), port=port):

                def get(path: str) -> Any:
                    return httpx.get(url + path, headers=auth, timeout=10).json()

                def pod_of(job_id: str, attempt: int) -> dict[str, Any] | None:
                    for pod in sim.call(lambda: sim.store("onprem-a").list("pods")[0]):
                        labels = pod["metadata"].get("labels") or {}
                        if labels.get(JOB_ID_LABEL) == job_id_label_value(job_id) and labels.get(
                            "gpufed.io/attempt"
                        ) == str(attempt):
                            return dict(pod)
                    return None

                def running(job_id: str, attempt: int) -> str | None:
                    j = get(f"/v1/jobs/{job_id}")
                    pod = (
                        pod_of(job_id, attempt)
                        if (j["state"], j["attempt"]) == ("RUNNING", attempt)
                        else None
                    )
                    return (pod or {}).get("spec", {}).get("nodeName")

                def fault_shown(node: str) -> bool:
                    body = get("/v1/fleet?nodes=true")
                    c = next(c for c in body["clusters"] if c["cluster"] == "onprem-a")
                    rows = (c.get("nodeDetail") or {}).get("items") or []
                    row = next((r for r in rows if r["name"] == node), {})
                    return any(f["gpu"] == 3 and f["xid"] == 79 for f in row.get("gpuFaults", []))

                wait(lambda: len(get("/v1/clusters")["items"]) == 3, 120, "the broker up")
                detected: list[float] = []
                moved: list[float] = []
                for r in range(args.rounds):
                    body = {
                        "name": f"bench-{r}", "gpus": 8, "gpuProducts": ["A100-80GB"], "durationSeconds": 3600,
                        "checkpoint": {"gracePeriodSeconds": 30},
                        "podAnnotations": {ANN_CHECKPOINT_SECONDS: "5", ANN_CHECKPOINT_EVERY: "20"},
                    }  # fmt: skip
                    job_id = httpx.post(url + "/v1/jobs", json=body, headers=auth, timeout=10).json()["id"]
                    node = wait(lambda j=job_id: running(j, 1), 120, "the job running")
                    wait(
                        lambda j=job_id: (
                            "gpufed.io/checkpoint"
                            in ((pod_of(j, 1) or {}).get("metadata", {}).get("annotations") or {})
                        ),
                        120,
                        "its first periodic checkpoint",
                    )
                    t0 = time.monotonic()
                    sim.gpu_xid("onprem-a", node, 3, 79)
                    wait(lambda n=node: fault_shown(n), 120, "the fault in the fleet view", 0.1)
                    detected.append(time.monotonic() - t0)
                    try:
                        new_node = wait(lambda j=job_id: running(j, 2), 300, "the job running again")
                    except SystemExit:
                        print(get(f"/v1/jobs/{job_id}"), get(f"/v1/jobs/{job_id}/events"), flush=True)
                        raise
                    moved.append(time.monotonic() - t0)
                    events = [e["reason"] for e in get(f"/v1/jobs/{job_id}/events")["items"]]
                    how = "moved off" if any(e.startswith("moved off") for e in events) else "pod died"
                    resume = get(f"/v1/jobs/{job_id}")["resumeFrom"]
                    print(
                        f"round {r}: detected {detected[-1]:.1f} s, moved {moved[-1]:.1f} s ({how}; "
                        f"{node} -> {new_node}, resumed from {resume})",
                        flush=True,
                    )
                    httpx.delete(f"{url}/v1/jobs/{job_id}", headers=auth, timeout=10)
                    sim.gpu_clear("onprem-a", node, 3)
                    wait(lambda n=node: not fault_shown(n), 120, "the GPU back")
                print(
                    f"detected: median {statistics.median(detected):.1f} s, max {max(detected):.1f} s; "
                    f"moved: median {statistics.median(moved):.1f} s, max {max(moved):.1f} s "
                    f"({args.rounds} rounds, intervalSeconds {args.interval:g})"
                )


if __name__ == "__main__":
    main()
