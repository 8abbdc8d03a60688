"""Member trouble end to end (docs/health.md): a broker over a kubesim fleet of two clusters, the jobs'
trouble read by watch from their pods and the Job controller's events, shown by `gpufed get`, and acted
on; the member side checked with the real kubectl. Small settings: memberPendingSeconds 2,
imagePullFailSeconds 4.

    small   one A100 node with 16 GiB of memory, and an H200 node published by the DRA driver while the
            cluster is declared `gpuAllocation: device-plugin` (the override: nothing H200 placeable)
    big     one A100 node with 512 GiB (device plugin), no gpuAllocation declared; an H200 node published
            by the DRA driver is added to it with kubectl (a mixed cluster)
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml

from broker import cli
from broker.app import main as composition
from broker.config.settings import load_fleet_config
from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, poll_for, wait_for
from tests.kubectl_cli import KUBECTL, run_kubectl

pytestmark = pytest.mark.integration

AUTH: dict[str, str] = {}
FLEET = {
    "clusters": [
        {
            "name": "small",
            "region": "eu-west",
            "podDurationSeconds": 30,
            "nodePools": [
                {"name": "a100", "count": 1, "cpu": "16", "memory": "16Gi",
                 "gpu": {"product": "A100-80GB", "count": 2}},
                {"name": "h200", "count": 1, "cpu": "64", "memory": "512Gi",
                 "gpu": {"product": "H200-141GB", "count": 4, "allocation": "dra"}},
            ],
        },
        {
            "name": "big",
            "region": "eu-west",
            "podDurationSeconds": 30,
            "nodePools": [
                {"name": "a100", "count": 1, "cpu": "64", "memory": "512Gi",
                 "gpu": {"product": "A100-80GB", "count": 2}},
            ],
        },
    ]
}  # fmt: skip


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: `make setup` installs it; these tests do not skip")
    # 20x simulated time: the kubelet's 10 s image pull back-offs pass in half a second
    with Simulation(parse_fleet(FLEET, "trouble"), tmp_path_factory.mktemp("trouble"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("trouble-broker")
    tokens, header = admin_tokens(workdir)
    AUTH.update(header)
    doc = {
        "clusters": [
            {
                "name": "small",
                "kubeconfig": str(sim.kubeconfig_path("small")),
                "gpuAllocation": "device-plugin",
            },
            {"name": "big", "kubeconfig": str(sim.kubeconfig_path("big"))},
        ],
        "settings": {
            "redisUrl": redis_url,
            "redisPrefix": "gpufed-trouble",
            "memberPendingSeconds": 2,
            "imagePullFailSeconds": 4,
            "priorityClasses": {"production": 1000},
        },
        "auth": {"tokensFile": str(tokens)},
    }
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: len(_fleet(url)) == 2, timeout=60, what="both clusters' summaries")
        yield url


def _fleet(url: str) -> dict[str, dict[str, Any]]:
    clusters = httpx.get(f"{url}/v1/fleet", headers=AUTH).json()["clusters"]
    return {c["cluster"]: c for c in clusters if c.get("products")}


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    def run(cluster: str, *args: str, stdin: str | None = None) -> str:
        return run_kubectl(*args, kubeconfig=sim.kubeconfig_path(cluster), cache=cache, stdin=stdin)

    cache = tmp_path_factory.mktemp("kubectl-cache")
    return run


def submit(url: str, **spec: Any) -> str:
    r = httpx.post(f"{url}/v1/jobs", json={"durationSeconds": 100000, **spec}, headers=AUTH)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def job(url: str, job_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH).json())


def events(url: str, job_id: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{url}/v1/jobs/{job_id}/events", headers=AUTH).json()["items"])


def state_is(url: str, job_id: str, *states: str) -> dict[str, Any] | None:
    j = job(url, job_id)
    return j if j["state"] in states else None


def wait_state(url: str, job_id: str, *states: str, within: float = 60) -> dict[str, Any]:
    """The job once in one of `states`; else fail with its record and events."""
    try:
        return poll_for(f"{job_id} in {states}", functools.partial(state_is, url, job_id, *states), within)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {job(url, job_id)} {events(url, job_id)}") from None


def cancel(url: str, job_id: str) -> None:
    httpx.delete(f"{url}/v1/jobs/{job_id}", headers=AUTH)
    wait_state(url, job_id, "CANCELLED", "FAILED", "SUCCEEDED")


@pytest.fixture
def gpufed(
    broker_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> Callable[..., str]:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GPUFED_CONFIG", raising=False)
    monkeypatch.delenv("GPUFED_CONTEXT", raising=False)
    monkeypatch.setenv("GPUFED_URL", broker_url)
    monkeypatch.setenv("GPUFED_TOKEN", AUTH["Authorization"].removeprefix("Bearer "))

    def run(*argv: str) -> str:
        capsys.readouterr()
        code = cli.run(list(argv))
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    return run


def add_dra_node(kubectl: Callable[..., str], source: str, target: str, name: str) -> None:
    """Add to `target`, with kubectl, a copy of `source`'s DRA node: the Node, its ResourceSlices and the
    driver's DeviceClasses (what the NVIDIA DRA driver's kubelet plugin would publish there)."""

    def fresh(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        keep = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": keep,
            "spec": obj.get("spec", {}),
        }

    classes = json.loads(kubectl(source, "get", "deviceclasses", "-o", "json"))["items"]
    nodes = json.loads(kubectl(source, "get", "nodes", "-o", "json"))["items"]
    node = next(n for n in nodes if "-h200-" in n["metadata"]["name"])
    old = node["metadata"]["name"]
    copy = fresh(node)
    copy["metadata"]["name"] = name
    copy["metadata"]["labels"] = {**copy["metadata"].get("labels", {}), "kubernetes.io/hostname": name}
    copy["status"] = {
        k: node["status"][k] for k in ("capacity", "allocatable", "conditions") if k in node["status"]
    }
    items = [fresh(c) for c in classes] + [copy]
    for published in json.loads(kubectl(source, "get", "resourceslices", "-o", "json"))["items"]:
        if published["spec"].get("nodeName") != old:
            continue
        rs = fresh(published)
        rs["metadata"]["name"] = rs["metadata"]["name"].replace(old, name)
        rs["spec"]["nodeName"] = name
        rs["spec"]["pool"]["name"] = name
        items.append(rs)
    for item in items:  # one at a time: the error names the object
        kubectl(target, "apply", "-f", "-", stdin=json.dumps(item))


def test_a_dra_node_added_with_kubectl_runs_its_product_through_a_claim_and_the_override_is_honoured(
    broker_url: str, kubectl: Callable[..., str]
) -> None:
    add_dra_node(kubectl, "small", "big", "big-h200-dra-0")

    def h200_on_big() -> dict[str, Any] | None:
        products = {p["product"]: p for p in _fleet(broker_url)["big"]["products"]}
        h200 = products.get("H200-141GB")
        return h200 if h200 is not None and h200["free"] == 4 else None

    h200 = poll_for("H200 on big in the fleet view", h200_on_big, 60)
    assert (h200["offered"], h200["askedThrough"]) == ("dra", "dra")  # no gpuAllocation: as published
    small = {p["product"]: p for p in _fleet(broker_url)["small"]["products"]}
    assert small["H200-141GB"]["offered"] == "dra" and small["H200-141GB"]["askedThrough"] == "device-plugin"
    j = submit(broker_url, name="h200", gpus=2, gpuProducts=["H200-141GB"])
    running = wait_state(broker_url, j, "RUNNING")
    assert running["cluster"] == "big"  # small, forced to the device plugin, has no H200 to place on
    assert all(e.get("cluster") in (None, "big") for e in events(broker_url, j))
    claims = kubectl("big", "get", "resourceclaims", "-n", "default")
    assert claims.count("allocated,reserved") == 1, claims
    cancel(broker_url, j)


def test_unschedulable_is_withdrawn_with_the_schedulers_message_and_runs_elsewhere(
    broker_url: str, kubectl: Callable[..., str]
) -> None:
    # big's A100s are taken, so the 64 GiB job goes where the broker sees free A100s: small, whose node has
    # 16 GiB (level 1 does not model node memory; the member's scheduler does)
    blocker = submit(broker_url, name="blocker", gpus=2, gpuProducts=["A100-80GB"], clusters=["big"])
    wait_state(broker_url, blocker, "RUNNING")
    j = submit(broker_url, name="fat", gpus=1, gpuProducts=["A100-80GB"], memoryGiB=64)

    def withdrawn() -> list[dict[str, Any]] | None:
        said = [e for e in events(broker_url, j) if e["reason"].startswith("withdrawn from small")]
        return said or None

    said = poll_for("withdrawn from small", withdrawn, 60)
    assert "Unschedulable: 0/2 nodes are available:" in said[0]["reason"], said
    assert "Insufficient memory" in said[0]["reason"], said
    assert said[0]["state"] == "QUEUED"
    seen = [e["reason"] for e in events(broker_url, j)]
    assert any(r.startswith("member trouble on small: Unschedulable: 0/2 nodes") for r in seen), seen
    # the member's view: the attempt's Job is gone
    poll_for(
        "the withdrawn Job deleted",
        lambda: "gf-" not in kubectl("small", "get", "jobs", "-n", "default", "--no-headers") or None,
        30,
    )
    cancel(broker_url, blocker)  # room on big: it runs there, small stays avoided
    running = wait_state(broker_url, j, "RUNNING")
    assert running["cluster"] == "big" and running["attempt"] == said[0]["attempt"] + 1, (running, said)
    cancel(broker_url, j)


def test_a_member_lacking_the_priority_class_is_withdrawn_with_the_admission_message(broker_url: str) -> None:
    """Small is the only cluster the job may use: withdrawn from it, it is parked (issue 48 finding 9: a
    job withdrawn from every cluster it may use waits for the fleet to change instead of bouncing), and
    the parked reason carries the withdrawal with the member's admission message."""
    j = submit(
        broker_url,
        name="prio",
        gpus=1,
        gpuProducts=["A100-80GB"],
        clusters=["small"],
        priorityClass="production",
    )

    def withdrawn() -> list[str] | None:
        said = [e["reason"] for e in events(broker_url, j) if "withdrawn from small" in e["reason"]]
        return said or None

    said = poll_for("withdrawn from small", withdrawn, 60)
    assert said[0].startswith("parked: withdrawn from every cluster it may use (small), last withdrawn"), said
    assert 'FailedCreate: Error creating: pods "' in said[0], said
    assert "is forbidden: no PriorityClass with name production was found" in said[0], said
    parked = job(broker_url, j)
    assert parked["state"] == "QUEUED" and parked["reason"].startswith("parked: withdrawn from every"), parked
    cancel(broker_url, j)


def test_an_unpullable_image_shows_image_pull_backoff_then_fails_with_the_registrys_message(
    broker_url: str, gpufed: Callable[..., str]
) -> None:
    j = submit(
        broker_url, name="pull", gpus=1, gpuProducts=["A100-80GB"], image="registry.invalid/team/train:1"
    )

    def backing_off() -> str | None:
        out = gpufed("get", j)
        return out if "ImagePullBackOff" in out else None

    out = poll_for("ImagePullBackOff in gpufed get", backing_off, 30)
    assert "member trouble on" in out
    failed = wait_state(broker_url, j, "FAILED")
    assert failed["reason"].startswith("image pull failed on "), failed
    assert (
        "lookup registry.invalid: no such host" in failed["reason"]
        or "Back-off pulling image" in failed["reason"]
    )
    described = gpufed("describe", j)
    assert "ImagePullBackOff" in described and "image pull failed on" in described


def test_a_crashing_job_ends_failed_with_its_exit_code(broker_url: str) -> None:
    j = submit(
        broker_url,
        name="crash",
        gpus=1,
        gpuProducts=["A100-80GB"],
        durationSeconds=2,
        podAnnotations={"sim.gpufed.io/exit-code": "3"},
    )
    failed = wait_state(broker_url, j, "FAILED")
    assert "exit code 3" in failed["reason"], failed
