"""The workload kinds on real parts: kubesim's demo fleet over HTTPS (onprem-a runs JobSet, KubeRay,
Trainer and the Training Operator; onprem-b JobSet, KubeRay and the Training Operator; cloud-burst none), a
private Redis, Ray pollers, the broker, real kubectl and the gpufed CLI. One fleet and broker per module.

- a JobSet (examples/jobset.yaml: leader 1 pod + workers 2 pods, 1 GPU each) runs as a JobSet only where
  the API is served and reaches Completed (one that could only go to cloud-burst is told "no
  jobset.x-k8s.io/v1alpha2"); cancelling a running one deletes it in its member;
- a RayJob submitted with `gpufed submit -f` runs its RayCluster in a member with KubeRay and ends
  SUCCEEDED; one that could only go where KubeRay is missing is told "no ray.io/v1";
- a TrainJob and a PyTorchJob run to completion;
- a JobSet and a RayJob whose member is lost move once and are never alive twice.
"""

from __future__ import annotations

import copy
import functools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker import cli
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import poll_for, wait_for
from tests.demo_broker import demo_broker, every_cluster_healthy
from tests.kubectl_cli import run_kubectl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
AUTH: dict[str, str] = {}
SPEED = 25.0
LOST_AFTER = 6
# group/version + plural of each kind, for reading every member's objects of a job
KINDS = {
    "JobSet": "jobsets.jobset.x-k8s.io",
    "RayJob": "rayjobs.ray.io",
    "PyTorchJob": "pytorchjobs.kubeflow.org",
    "TrainJob": "trainjobs.trainer.kubeflow.org",
}
TERMINAL = {
    "JobSet": ("Completed", "Failed"),
    "PyTorchJob": ("Succeeded", "Failed"),
    "TrainJob": ("Complete", "Failed"),
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=SPEED) as s:
        yield s


@pytest.fixture(scope="module")
def url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    settings = {"clusterLostSeconds": LOST_AFTER, "sweepIntervalSeconds": 5}
    with demo_broker(sim, tmp_path_factory.mktemp("broker"), redis_url, "gpufed-kinds", settings) as broker:
        AUTH.update(broker.auth)
        # every member's APIs are read (discovery) before a kind is submitted
        wait_for(lambda: _apis_known(sim, broker), timeout=60, what="the members' workload APIs read")
        yield broker.url


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    cache = tmp_path_factory.mktemp("kubectl")

    def run(cluster: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        return run_kubectl(*args, kubeconfig=sim.kubeconfig_path(cluster), cache=cache / cluster, ok=ok)

    return run


def _apis_known(sim: Simulation, broker: Any) -> bool:
    seen = {s.cluster: s.workload_apis_observed for s in broker.broker.store.observed_summaries()}
    return all(seen.get(c) for c in sim.cluster_names())


def _example(name: str, **annotations: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


def _submit(obj: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{URL[0]}/v1/jobs", json=obj, timeout=10, headers=AUTH)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


URL: list[str] = []


@pytest.fixture(autouse=True)
def _url(url: str, sim: Simulation) -> Iterator[None]:
    URL[:] = [url]
    yield
    for name in sim.cluster_names():
        sim.faults(name).clear()
    wait_for(
        lambda: every_cluster_healthy(url, AUTH, 3) and not _fenced(url), timeout=90, what="the fleet healthy"
    )


def _fenced(url: str) -> list[str]:
    items = httpx.get(f"{url}/v1/clusters", timeout=10, headers=AUTH).json()["items"]
    return [c["name"] for c in items if c["fenced"]]


def _job(job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{URL[0]}/v1/jobs/{job_id}", timeout=10, headers=AUTH).json()
    return body


def _state(job_id: str, state: str, timeout: float = 240) -> dict[str, Any]:
    job: dict[str, Any] = poll_for(
        f"{job_id} {state} (events: {_events(job_id)})" if False else f"{job_id} {state}",
        lambda: (j := _job(job_id))["state"] == state and j,
        timeout,
        interval=0.1,
    )
    return job


def _events(job_id: str) -> list[str]:
    items = httpx.get(f"{URL[0]}/v1/jobs/{job_id}/events", timeout=10, headers=AUTH).json()["items"]
    return [f"{e['state']}: {e['reason']}" for e in items]


def _objects(sim: Simulation, kind: str, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(cluster, object) of every member object of this kind carrying the job's id."""
    out = []
    for cluster in sim.cluster_names():
        store = sim.store(cluster)
        items, _ = sim.call(functools.partial(store.list, KINDS[kind]))
        out += [
            (cluster, copy.deepcopy(o))
            for o in items
            if (o["metadata"].get("labels") or {}).get("gpufed.io/job-id") == job_id
        ]
    return out


def _alive(kind: str, obj: dict[str, Any]) -> bool:
    if obj["metadata"].get("deletionTimestamp"):
        return False
    status = obj.get("status") or {}
    if kind == "RayJob":
        return status.get("jobDeploymentStatus") not in ("Complete", "Failed")
    return not any(
        c.get("type") in TERMINAL[kind] and c.get("status") == "True" for c in status.get("conditions") or ()
    )


def test_a_jobset_runs_as_a_jobset_where_served_and_a_cancel_deletes_it(
    sim: Simulation, kubectl: Callable[..., str]
) -> None:
    job = _submit(_example("jobset.yaml"))
    assert (job["request"]["pods"], job["request"]["gpus"]) == (
        3,
        1,
    )  # leader 1 + workers 2, 1 GPU each, one gang
    done = _state(job["id"], "SUCCEEDED")
    assert done["cluster"] in ("onprem-a", "onprem-b")  # the members that serve jobset.x-k8s.io/v1alpha2
    name = done["workload"]
    conditions = json.loads(
        kubectl(done["cluster"], "get", "jobset", name, "-o", "jsonpath={.status.conditions}")
    )
    assert any(c["type"] == "Completed" and c["status"] == "True" for c in conditions)
    assert "doesn't have a resource type" in kubectl("cloud-burst", "get", "jobsets", ok=(1,))
    _told("jobset.yaml", "no jobset.x-k8s.io/v1alpha2")

    long = _example("jobset.yaml", **{"gpufed.io/duration-seconds": "3000"})
    long["metadata"]["name"] = "jobset-cancelled"
    cancelled = _submit(long)
    running = _state(cancelled["id"], "RUNNING")
    r = httpx.delete(f"{URL[0]}/v1/jobs/{cancelled['id']}", timeout=10, headers=AUTH)
    assert r.status_code == 200, r.text
    wait_for(
        lambda: not _objects(sim, "JobSet", cancelled["id"]),
        timeout=30,
        what=f"JobSet {running['workload']} deleted from {running['cluster']}",
    )


def test_a_rayjob_from_gpufed_submit_f_runs_its_raycluster_with_kuberay(
    sim: Simulation, kubectl: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rayjob.yaml"
    obj = yaml.safe_load((REPO / "examples" / "rayjob.yaml").read_text())
    obj["metadata"]["name"] += "-" + tmp_path.name[-6:].lower().strip("_-")  # its own name on a rerun too
    path.write_text(yaml.safe_dump(obj))
    token = AUTH["Authorization"].removeprefix("Bearer ")
    capsys.readouterr()
    code = cli.run(["submit", "-f", str(path), "-o", "json", "--server", URL[0], "--token", token])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the CLI's answer; other JSON may share this process's stdout (a console span exporter that another
    # test's telemetry set-up left on), so take the document that is a job
    job_id = next(
        d["id"] for d in _json_documents(out) if isinstance(d, dict) and {"id", "state"} <= d.keys()
    )
    running = _state(job_id, "RUNNING")
    where = running["cluster"]
    assert where in ("onprem-a", "onprem-b")  # the members with KubeRay
    pods = kubectl(where, "get", "pods", "-l", "ray.io/cluster", "-o", "name")
    assert f"{running['workload']}-raycluster-head" in pods
    done = _state(job_id, "SUCCEEDED")
    status = json.loads(kubectl(where, "get", "rayjob", done["workload"], "-o", "jsonpath={.status}"))
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED")

    _told("rayjob.yaml", "no ray.io/v1")


def _json_documents(text: str) -> list[Any]:
    """Every JSON document in `text`, one after the other."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


def _told(example: str, reason: str) -> None:
    """A kind that only cloud-burst (H200s, no operator) could hold: the placer's verdict names the API."""
    obj = _example(example, **{"gpufed.io/gpu-products": "H200-141GB", "gpufed.io/allow-burst": "true"})
    obj["metadata"]["name"] += "-h200-" + uuid.uuid4().hex[:4]  # its own name on a rerun too
    job = _submit(obj)
    poll_for(f"{obj['metadata']['name']} told {reason!r}", lambda: reason in _job(job["id"])["reason"], 30)
    httpx.delete(f"{URL[0]}/v1/jobs/{job['id']}", timeout=10, headers=AUTH)


def test_a_trainjob_and_a_pytorchjob_run_to_completion(sim: Simulation) -> None:
    train = _submit(_example("trainjob.yaml"))
    torch = _submit(_example("pytorchjob.yaml"))
    assert _state(train["id"], "SUCCEEDED")["cluster"] == "onprem-a"  # the one with the Trainer runtime
    assert _state(torch["id"], "SUCCEEDED")["cluster"] in ("onprem-a", "onprem-b")
    ((_, tj),) = _objects(sim, "TrainJob", train["id"])
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in tj["status"]["conditions"])


@pytest.mark.race
@pytest.mark.parametrize(
    ("example", "kind", "extra"),
    [("jobset.yaml", "JobSet", {}), ("rayjob.yaml", "RayJob", {})],
)
def test_a_lost_member_s_kind_moves_once_and_is_never_alive_twice(
    sim: Simulation, example: str, kind: str, extra: dict[str, str]
) -> None:
    obj = _example(example, **{"gpufed.io/duration-seconds": "300", **extra})
    obj["metadata"]["name"] = f"fo-{kind.lower()}"
    job_id = _submit(obj)["id"]
    lost = _state(job_id, "RUNNING")["cluster"]
    sim.faults(lost).set(down=True)
    try:
        moved: dict[str, Any] = wait_for(  # type: ignore[assignment]
            lambda: (j := _job(job_id))["state"] == "RUNNING" and j["cluster"] != lost and j,
            timeout=90,
            what=f"{job_id} RUNNING elsewhere after {lost} went down",
        )
    except BaseException as e:
        raise AssertionError(f"{e}; its events: {_events(job_id)}") from None
    assert moved["attempt"] == 2
    sim.faults(lost).clear()
    wait_for(lambda: lost not in _fenced(URL[0]), timeout=90, what=f"{lost}'s fence lifted")
    alive = [(c, o["metadata"]["name"]) for c, o in _objects(sim, kind, job_id) if _alive(kind, o)]
    assert alive == [(moved["cluster"], moved["workload"])]  # the stale attempt was deleted first
    done = _state(job_id, "SUCCEEDED", timeout=120)
    assert done["attempt"] == 2
