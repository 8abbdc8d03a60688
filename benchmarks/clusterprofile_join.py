"""How fast a ClusterProfile member joins and leaves: profile written on the hub -> cluster in the fleet
view -> a job placed on it; profile deleted -> cluster gone from the fleet view.

Runs kubesim (a hub and one H100 member over HTTPS), a private redis-server, Ray and the whole broker
(`running_broker` with clusterProfiles, pollSeconds as given), and the test exec plugin
(tests/fixtures/exec_token_plugin.py) as the access provider's credentials.

    .venv/bin/python -m benchmarks.clusterprofile_join --rounds 5 --poll 2
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client, config

from adapters.redis_process import free_port, private_redis
from broker.app import main as composition
from broker.config.settings import load_fleet_config
from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests" / "fixtures" / "exec_token_plugin.py"
NS, GROUP, VERSION, PLURAL = "fleet-system", "multicluster.x-k8s.io", "v1alpha1", "clusterprofiles"


def until(pred: Callable[[], bool], timeout: float = 120.0) -> float:
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            raise SystemExit("timed out")
        time.sleep(0.02)
    return time.monotonic() - start


def state_is(url: str, job: str, states: tuple[str, ...]) -> bool:
    return bool(httpx.get(f"{url}/v1/jobs/{job}").json()["state"] in states)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--poll", type=float, default=2.0, help="clusterProfiles.pollSeconds")
    args = parser.parse_args()
    fleet = parse_fleet(
        {
            "clusters": [
                {"name": "hub", "region": "eu", "namespaces": [NS]},
                {
                    "name": "gpu",
                    "region": "eu",
                    "nodePools": [{"name": "h", "count": 2, "gpu": {"product": "H100-80GB"}}],
                },
            ]
        }
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        private_redis() as redis,
        Simulation(fleet, Path(tmp) / "sim", speed=50) as sim,
    ):
        work = Path(tmp)
        (work / "tokens.json").write_text(json.dumps({"gpu": sim.token("gpu")}))
        exec_config = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(PLUGIN)],
            "env": [{"name": "GPUFED_TEST_TOKENS", "value": str(work / "tokens.json")}],
            "provideClusterInfo": True,
        }
        (work / "providers.json").write_text(
            json.dumps({"providers": [{"name": "tok", "execConfig": exec_config}]})
        )
        doc = {
            "clusterProfiles": {
                "hubKubeconfig": str(sim.kubeconfig_path("hub")),
                "namespace": NS,
                "providerFile": "providers.json",
                "pollSeconds": args.poll,
                "publish": False,
            },
            "settings": {"redisUrl": redis.url, "redisPrefix": "bench-cp"},
        }
        (work / "clusters.yaml").write_text(yaml.safe_dump(doc))
        hub_api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(sim.kubeconfig_path("hub")), persist_config=False
        )
        hub = client.CustomObjectsApi(hub_api)
        profile: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterProfile",
            "metadata": {"name": "gpu", "namespace": NS},
            "spec": {"displayName": "gpu", "clusterManager": {"name": "gpufed"}},
        }
        status = {
            "status": {
                "accessProviders": [
                    {
                        "name": "tok",
                        "cluster": {
                            "server": sim.server_url("gpu"),
                            "certificate-authority-data": base64.b64encode(
                                sim.ca_path("gpu").read_bytes()
                            ).decode(),
                            "extensions": [
                                {
                                    "name": "client.authentication.k8s.io/exec",
                                    "extension": {"clusterName": "gpu"},
                                }
                            ],
                        },
                    }
                ]
            }
        }
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        joins, placed, leaves = [], [], []
        with composition.running_broker(  # auth is not the subject here
            load_fleet_config(work / "clusters.yaml"), port=port, insecure_no_auth=True
        ):

            def in_fleet() -> bool:
                return any(c["cluster"] == "gpu" for c in httpx.get(f"{url}/v1/fleet").json()["clusters"])

            for i in range(args.rounds):
                job = httpx.post(
                    f"{url}/v1/jobs", json={"name": f"j{i}", "gpus": 1, "durationSeconds": 5}
                ).json()["id"]
                start = time.monotonic()
                hub.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, profile)
                hub.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "gpu", status)
                joins.append(until(in_fleet))
                until(functools.partial(state_is, url, job, ("PLACED", "ADMITTED", "RUNNING", "SUCCEEDED")))
                placed.append(time.monotonic() - start)
                until(functools.partial(state_is, url, job, ("SUCCEEDED",)))
                start = time.monotonic()
                hub.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "gpu")
                leaves.append(until(lambda: not in_fleet()))
    print(f"pollSeconds {args.poll}, {args.rounds} rounds")
    for label, xs in (
        ("profile -> in fleet view", joins),
        ("profile -> job placed", placed),
        ("delete -> out of fleet", leaves),
    ):
        print(f"{label}: median {statistics.median(xs):.2f} s, max {max(xs):.2f} s")


if __name__ == "__main__":
    main()
