"""kubectl-native submission through a hub (docs/hub.md), on real parts: a hub kubesim cluster where a user
applies batch/v1 Jobs with the real kubectl and `spec.managedBy: gpufed.io/broker`, a GPU member
cluster, Redis, Ray pollers and the broker (`hub:` in its clusters.yaml) with its HTTP API.

The hub Job runs in the member (its copy without managedBy), the hub itself makes no pods for it, and
`kubectl get job -o jsonpath` on the hub shows its completion (Complete, succeeded, completionTime); the
REST view names the hub object as the job's source; a refused hub Job says why on the hub (a Failed
condition and an Event naming the field); deleting a hub Job cancels its job; a broker restarted after
a crash between its submit and its write-back finds the same job (never a second), and cancels the job
of a hub Job deleted while it was down.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, poll_for, wait_for
from tests.kubectl_cli import run_kubectl

pytestmark = pytest.mark.integration

NS = "team-a"
TENANT = "vision"
FLEET = {
    "clusters": [
        {"name": "hub", "region": "eu-west", "namespaces": [NS], "operators": ["jobset"]},
        {
            "name": "gpu-east",
            "region": "us-east",
            "operators": ["jobset"],
            "nodePools": [
                {"name": "h100", "count": 1, "cpu": "64", "memory": "512Gi", "gpu": {"product": "H100-80GB"}}
            ],
        },
    ]
}
Kubectl = Callable[..., str]


def hub_job(name: str, seconds: int, containers: int = 1) -> str:
    """A batch/v1 Job as a user writes it for the hub: managedBy gpufed.io/broker, 1 GPU per pod."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "managedBy": "gpufed.io/broker",
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"sim.gpufed.io/duration-seconds": str(seconds)}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": f"c{i}",
                            "image": "ghcr.io/example/train:1.2",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                        for i in range(containers)
                    ],
                },
            },
        },
    }
    return yaml.safe_dump(job)


def hub_jobset(name: str, seconds: int) -> str:
    """examples/jobset.yaml as a user applies it to the hub: managedBy gpufed.io/broker, a leader (1 pod)
    and workers (2 pods), 1 GPU each."""
    obj = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "jobset.yaml").read_text())
    obj["metadata"] = {
        "name": name,
        "namespace": NS,
        "annotations": {"gpufed.io/duration-seconds": str(seconds)},
    }
    obj["spec"]["managedBy"] = "gpufed.io/broker"
    return yaml.safe_dump(obj)


class Broker:
    """One broker at a time over the same Redis prefix, stopped and started again by restart()."""

    def __init__(self, path: Path, headers: dict[str, str]) -> None:
        self.path = path
        self.headers = headers
        self.url = ""
        self._stack: contextlib.ExitStack | None = None

    def start(self) -> None:
        port = free_port()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(composition.running_broker(load_fleet_config(self.path), port=port))
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def job(self, job_id: str) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.url}/v1/jobs/{job_id}", headers=self.headers).json()
        return body

    def jobs_named(self, name: str) -> list[dict[str, Any]]:
        got = httpx.get(f"{self.url}/v1/jobs", params={"name": name}, headers=self.headers).json()
        return [j for j in got["items"] if j["name"] == name]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(parse_fleet(FLEET), tmp_path_factory.mktemp("hub-kubeconfigs"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    cache = tmp_path_factory.mktemp("hub-kubectl")
    return functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path("hub"), cache=cache)


@pytest.fixture(scope="module")
def member(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], dict[str, Any]]:
    """The member's Jobs in the broker's namespace, by name (kubectl get jobs -o json)."""
    cache = tmp_path_factory.mktemp("member-kubectl")

    def jobs() -> dict[str, Any]:
        out = run_kubectl(
            "get",
            "jobs",
            "-n",
            "default",
            "-o",
            "json",
            kubeconfig=sim.kubeconfig_path("gpu-east"),
            cache=cache,
        )
        return {j["metadata"]["name"]: j for j in json.loads(out)["items"]}

    return jobs


@pytest.fixture(scope="module")
def broker(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Broker]:
    workdir = tmp_path_factory.mktemp("hub-broker")
    tokens, header = admin_tokens(workdir)
    doc = {
        "clusters": [
            {"name": "gpu-east", "kubeconfig": str(sim.kubeconfig_path("gpu-east")), "region": "us-east"}
        ],
        "hub": {
            "kubeconfig": str(sim.kubeconfig_path("hub")),
            "tenantMapping": {NS: TENANT},
            "reconcileSeconds": 1,
        },
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-hub"},
        "auth": {"tokensFile": str(tokens)},
    }
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    b = Broker(path, header)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def jsonpath(kubectl: Kubectl, name: str, expr: str, kind: str = "job") -> str:
    return kubectl("get", kind, name, "-n", NS, "-o", f"jsonpath={expr}").strip()


def job_id_of(kubectl: Kubectl, name: str, kind: str = "job") -> str:
    found = wait_for(
        lambda: jsonpath(kubectl, name, r"{.metadata.annotations.gpufed\.io/job-id}", kind),
        timeout=30,
        what=f"the job id written back on hub Job {name}",
    )
    return str(found)


def test_a_hub_job_runs_in_the_member_and_its_completion_shows_on_the_hub(
    broker: Broker, kubectl: Kubectl, member: Callable[[], dict[str, Any]]
) -> None:
    kubectl("apply", "-f", "-", stdin=hub_job("train", 20))
    job_id = job_id_of(kubectl, "train")
    view = broker.job(job_id)
    assert view["source"] == f"hub:jobs.batch/{NS}/train"
    assert view["tenant"] == TENANT
    wait_for(
        lambda: jsonpath(kubectl, "train", '{.status.conditions[?(@.type=="Complete")].status}') == "True",
        timeout=60,
        what="the Complete condition on the hub Job",
    )
    assert jsonpath(kubectl, "train", "{.status.succeeded}") == "1"
    assert jsonpath(kubectl, "train", "{.status.completionTime}")
    assert jsonpath(kubectl, "train", "{.status.startTime}")
    assert jsonpath(kubectl, "train", r"{.metadata.annotations.gpufed\.io/cluster}") == "gpu-east"
    assert broker.job(job_id)["state"] == "SUCCEEDED"
    # the member copy runs under its own controller; the hub's Job controller made no pod
    copy = member()[broker.job(job_id)["workload"]]
    assert "managedBy" not in copy["spec"]
    assert copy["status"]["succeeded"] == 1
    assert json.loads(kubectl("get", "pods", "-n", NS, "-o", "json"))["items"] == []


def test_a_refused_hub_job_says_why_on_the_hub(broker: Broker, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", "-", stdin=hub_job("two-containers", 5, containers=2))
    expr = '{.status.conditions[?(@.type=="Failed")].message}'
    message = wait_for(lambda: jsonpath(kubectl, "two-containers", expr), timeout=30, what="the refusal")
    assert str(message).startswith("spec.template.spec.containers[1]:")
    assert jsonpath(kubectl, "two-containers", '{.status.conditions[?(@.type=="Failed")].reason}') == (
        "GpufedRefused"
    )
    events = json.loads(kubectl("get", "events", "-n", NS, "-o", "json"))["items"]
    refused = [e for e in events if e["involvedObject"]["name"] == "two-containers"]
    assert [e["reason"] for e in refused] == ["Refused"]
    assert "spec.template.spec.containers[1]" in refused[0]["message"]
    assert broker.jobs_named("two-containers") == []


def test_deleting_a_hub_job_cancels_it_in_the_member(
    broker: Broker, kubectl: Kubectl, member: Callable[[], dict[str, Any]]
) -> None:
    kubectl("apply", "-f", "-", stdin=hub_job("long", 36_000))
    job_id = job_id_of(kubectl, "long")
    wait_for(
        lambda: jsonpath(kubectl, "long", r"{.metadata.annotations.gpufed\.io/state}") == "RUNNING",
        timeout=60,
        what="the hub Job's job RUNNING",
    )
    workload = broker.job(job_id)["workload"]
    assert member()[workload]["status"]["active"] == 1
    kubectl("delete", "job", "long", "-n", NS)
    wait_for(lambda: broker.job(job_id)["state"] == "CANCELLED", timeout=30, what="the job CANCELLED")
    wait_for(lambda: workload not in member(), timeout=30, what="the member Job deleted")


@pytest.mark.race
def test_a_restarted_broker_submits_nothing_twice_and_cancels_what_was_deleted_meanwhile(
    broker: Broker, kubectl: Kubectl, caplog: pytest.LogCaptureFixture
) -> None:
    kubectl("apply", "-f", "-", stdin=hub_job("steady", 36_000))
    kubectl("apply", "-f", "-", stdin=hub_job("doomed", 36_000))
    steady, doomed = job_id_of(kubectl, "steady"), job_id_of(kubectl, "doomed")
    broker.stop()
    # as if the broker had died between its submit and its write-back: the job id is not on the hub
    kubectl("annotate", "job", "steady", "-n", NS, "gpufed.io/job-id-")
    kubectl("delete", "job", "doomed", "-n", NS)
    with caplog.at_level(logging.INFO, logger="adapters.hub_watcher"):
        broker.start()
        assert job_id_of(kubectl, "steady") == steady

        def skipped() -> list[str] | None:
            lines = [r.getMessage() for r in caplog.records if "is not served; skipped" in r.getMessage()]
            return lines if len(lines) >= 3 else None

        # kubesim's hub serves batch/v1 and JobSet: each other watched kind is said once, then looked up again
        lines = poll_for("the kinds the hub does not serve, said once each", skipped, 30)
        assert sorted(line.split()[2] for line in lines) == ["PyTorchJob", "RayJob", "TrainJob"]
    assert [j["id"] for j in broker.jobs_named("steady")] == [steady]
    wait_for(lambda: broker.job(doomed)["state"] == "CANCELLED", timeout=30, what="the doomed job CANCELLED")
    assert broker.job(steady)["state"] not in ("CANCELLED", "FAILED")


def test_a_hub_jobset_runs_as_a_jobset_in_the_member_and_the_hub_object_reaches_completed(
    broker: Broker, kubectl: Kubectl, sim: Simulation
) -> None:
    kubectl("apply", "-f", "-", stdin=hub_jobset("js-train", 20))
    kubectl("apply", "-f", "-", stdin=hub_jobset("js-long", 36_000))
    done, long = job_id_of(kubectl, "js-train", "jobset"), job_id_of(kubectl, "js-long", "jobset")
    assert broker.job(done)["source"] == f"hub:jobsets.jobset.x-k8s.io/{NS}/js-train"
    completed = '{.status.conditions[?(@.type=="Completed")].status}'
    wait_for(
        lambda: jsonpath(kubectl, "js-train", completed, "jobset") == "True",
        timeout=90,
        what="the Completed condition on the hub JobSet",
    )
    assert broker.job(done)["state"] == "SUCCEEDED"
    assert (
        jsonpath(kubectl, "js-train", r"{.metadata.annotations.gpufed\.io/cluster}", "jobset") == "gpu-east"
    )
    member_kubectl = functools.partial(
        run_kubectl, kubeconfig=sim.kubeconfig_path("gpu-east"), cache=sim.kubeconfig_path("gpu-east").parent
    )
    copy = json.loads(
        member_kubectl("get", "jobset", broker.job(done)["workload"], "-n", "default", "-o", "json")
    )
    assert "managedBy" not in copy["spec"]  # the member's JobSet controller runs it
    # deleting the other hub JobSet cancels its job and deletes the member's JobSet
    wait_for(
        lambda: (
            jsonpath(kubectl, "js-long", r"{.metadata.annotations.gpufed\.io/state}", "jobset") == "RUNNING"
        ),
        timeout=60,
        what="the long JobSet's job RUNNING",
    )
    workload = broker.job(long)["workload"]
    kubectl("delete", "jobset", "js-long", "-n", NS)
    wait_for(lambda: broker.job(long)["state"] == "CANCELLED", timeout=30, what="the job CANCELLED")
    wait_for(
        lambda: workload not in member_kubectl("get", "jobsets", "-n", "default", "-o", "name"),
        timeout=30,
        what="the member's JobSet deleted",
    )
