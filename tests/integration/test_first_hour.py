"""Issue 28, what a new user meets in the first hour, against the real API (create_app over BrokerService
on a real Redis, served by uvicorn in a thread) with the CLI run in-process (broker.cli.run): one live job
per name (409 AlreadyExists), the whole reason in `get`, GPU product aliases, validation in plain words,
RFC 3339 times, and the kubectl habits (describe, -l, -o jsonpath, --version)."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from adapters.kube import KubeGateway
from adapters.redis_store import RedisStateStore
from broker import cli
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from tests.conftest import free_port, wait_for
from tests.service_doubles import ManualClock, idle_h100_node

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PREFIX = "gpufed-first-hour"


@pytest.fixture
def service(redis_url: str) -> Iterator[BrokerService]:
    store = RedisStateStore(redis_url, prefix=PREFIX, unique_names=True)
    clock = ManualClock()
    svc = BrokerService(store, KubeGateway({}), clock, {"onprem-a": ClusterTraits(name="onprem-a")})
    store.put_summary(idle_h100_node("onprem-a", clock.now()))
    yield svc
    keys = list(store.client.scan_iter(match=f"{PREFIX}:*"))
    if keys:
        store.client.delete(*keys)
    store.close()


@pytest.fixture
def url(service: BrokerService) -> Iterator[str]:
    app = create_app(service, service.clock, logs=KubeGateway({}))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="the API to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFED_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/gpufed/config.yaml of the machine's user
    for var in ("GPUFED_URL", "GPUFED_TOKEN", "GPUFED_CONTEXT"):
        monkeypatch.delenv(var, raising=False)


def gpufed(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _post(url: str, body: dict[str, Any] | str, **headers: str) -> httpx.Response:
    if isinstance(body, str):
        return httpx.post(
            f"{url}/v1/jobs", content=body, headers={"content-type": "application/yaml", **headers}
        )
    return httpx.post(f"{url}/v1/jobs", json=body, headers=headers)


# --------------------------------------------------------------------------- 4: one live job per name


def test_a_second_live_job_with_the_same_name_is_409_already_exists(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = (REPO / "examples" / "job.yaml").read_text()
    first = _post(url, job)
    assert first.status_code == 201, first.text
    second = _post(url, job)
    assert second.status_code == 409, second.text
    body = second.json()
    assert body["error"] == "already-exists"
    assert (
        "a job named 'finetune' already exists" in body["message"] and first.json()["id"] in body["message"]
    )

    # the same Idempotency-Key is a retry, not a second job: the first answer again, not 409
    keyed = _post(url, {"name": "keyed", "gpus": 1}, **{"Idempotency-Key": "k1"})
    again = _post(url, {"name": "keyed", "gpus": 1}, **{"Idempotency-Key": "k1"})
    assert (keyed.status_code, again.status_code) == (201, 200) and keyed.json()["id"] == again.json()["id"]

    # the CLI says it in one line and exits 1, as kubectl create does
    code, _, err = gpufed(capsys, "submit", "-f", str(REPO / "examples" / "job.yaml"), "--server", url)
    assert code == 1 and "409 a job named 'finetune' already exists" in err

    # a finished (here: cancelled) job's name may be reused; the name then means the live job
    assert httpx.delete(f"{url}/v1/jobs/{first.json()['id']}").status_code == 200
    reused = _post(url, job)
    assert reused.status_code == 201, reused.text
    code, out, _ = gpufed(capsys, "get", "finetune", "-o", "json", "--server", url)
    assert code == 0 and json.loads(out)["id"] == reused.json()["id"]


# --------------------------------------------------------------------------- 3: the whole reason


def test_get_shows_the_whole_reason_and_the_list_marks_a_cut(
    url: str, service: BrokerService, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "0/3 clusters are available: " + ", ".join(
        f"{i} no room for {i} pods x 8 H100-80GB" for i in range(1, 9)
    )
    job = _post(url, {"name": "long-reason", "gpus": 1}).json()
    record = service.get(job["id"])
    service.store.save_job(dataclasses.replace(record, reason=reason))  # as the control loop writes one
    code, out, _ = gpufed(capsys, "get", "long-reason", "--server", url)
    assert code == 0 and reason in out
    code, out, _ = gpufed(capsys, "jobs", "--server", url)
    assert reason not in out and reason[:50] in out and "..." in out


# --------------------------------------------------------------------------- 6: product names as users write them


def _plain_job(name: str, annotations: dict[str, str], gpus: Any = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                }
            }
        },
    }


def test_gpu_products_take_short_names_and_node_label_values_else_did_you_mean(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = gpufed(capsys, "submit", "short", "--product", "h100", "-o", "json", "--server", url)
    assert code == 0, err
    assert json.loads(out)["request"]["gpuProducts"] == ["H100-80GB"]
    r = _post(url, {"name": "label", "gpus": 1, "gpuProducts": ["NVIDIA-H100-80GB-HBM3"]})
    assert r.status_code == 201 and r.json()["request"]["gpuProducts"] == ["H100-80GB"]

    code, _, err = gpufed(capsys, "submit", "two", "--product", "a100", "--server", url)
    assert code == 1 and "did you mean A100-40GB or A100-80GB?" in err and "gpuProducts[0]" in err

    r = _post(url, _plain_job("plain", {"gpufed.io/gpu-products": "H10"}))
    assert r.status_code == 422
    (field,) = r.json()["fields"]
    assert field["field"] == "metadata.annotations[gpufed.io/gpu-products]"  # what the user wrote
    assert "did you mean H100-80GB or H100-NVL-94GB?" in field["message"]


# --------------------------------------------------------------------------- 7: validation in plain words


def test_every_bad_field_is_named_in_plain_words(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    r = _post(url, {"name": "Bad_Name", "gpus": 128, "pods": "two"})
    assert r.status_code == 422
    fields = {f["field"]: f["message"] for f in r.json()["fields"]}
    assert fields["name"] == (
        "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit "
        "(got 'Bad_Name')"
    )
    assert fields["gpus"].startswith(
        "must be at most 64 per pod (got 128); for more GPUs ask for several pods"
    )
    assert fields["pods"] == "must be a whole number (got 'two')"
    assert "should" not in r.json()["message"]  # no pydantic phrasing

    code, _, err = gpufed(capsys, "submit", "Bad_Name", "--gpus", "128", "--server", url)
    assert code == 1 and "name: must be a DNS label" in err and "gpus: must be at most 64 per pod" in err


# --------------------------------------------------------------------------- 10: RFC 3339 times


def test_times_are_rfc3339_in_json_and_yaml(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    stamp = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"
    _post(url, {"name": "timed", "gpus": 1})
    code, out, _ = gpufed(capsys, "get", "timed", "-o", "yaml", "--server", url)
    job = yaml.safe_load(out)
    assert code == 0 and re.match(stamp, job["createdAt"]) and re.match(stamp, job["updatedAt"])
    code, out, _ = gpufed(capsys, "events", "timed", "-o", "json", "--server", url)
    assert all(re.match(stamp, e["at"]) for e in json.loads(out)["items"])


# --------------------------------------------------------------------------- kubectl and SkyPilot habits


def test_describe_selector_jsonpath_shorthand_and_show_gpus(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = gpufed(
        capsys,
        "submit",
        "big",
        "--gpus",
        "H100:8",
        "-o",
        "jsonpath={.request.gpus} {.request.gpuProducts[0]}",
        "--server",
        url,
    )
    assert (code, out.strip()) == (0, "8 H100-80GB"), err
    _post(url, {"name": "nlp-a", "gpus": 1, "labels": {"team": "nlp"}})
    _post(url, {"name": "cv-b", "gpus": 16, "labels": {"team": "cv"}})

    code, out, _ = gpufed(
        capsys, "jobs", "-l", "team=nlp", "-o", "jsonpath={.items[*].name}", "--server", url
    )
    assert (code, out.strip()) == (0, "nlp-a")
    code, out, _ = gpufed(
        capsys,
        "jobs",
        "--selector",
        "team!=nlp",
        "-o",
        'jsonpath={range .items[*]}{.name}{"\\n"}{end}',
        "--server",
        url,
    )
    assert code == 0 and sorted(out.split()) == ["big", "cv-b"]  # one line each (same age: any order)
    code, _, err = gpufed(capsys, "jobs", "-o", "jsonpath={.items[0].nope}", "--server", url)
    assert code == 2 and "jsonpath: .items[0].nope is not found" in err

    code, out, _ = gpufed(capsys, "describe", "cv-b", "--server", url)
    assert code == 0
    for says in (
        "Name:",
        "cv-b",
        "Labels:",
        "team=cv",
        "Spec:",
        "16 x 1 pod(s)",
        "Verdicts (if placed now):",
        "Events:",
    ):
        assert says in out, out
    verdict = next(line for line in out.splitlines() if line.strip().startswith("onprem-a"))
    assert "no node with 16 free" in verdict

    code, out, _ = gpufed(capsys, "show-gpus", "--server", url)
    row = next(line for line in out.splitlines() if line.startswith("H100-80GB"))
    assert code == 0 and row.split()[:6] == ["H100-80GB", "80", "GiB", "onprem-a", "on-prem", "8/8"]
    code, out, _ = gpufed(capsys, "show-gpus", "h200", "--server", url)
    assert code == 0 and out.strip() == "No GPUs matching 'h200'."


def test_a_plain_job_with_two_bad_fields_hears_of_both(url: str) -> None:
    job = _plain_job("Bad_Name", {}, gpus="two")
    r = _post(url, job)
    assert r.status_code == 422
    fields = {f["field"]: f["message"] for f in r.json()["fields"]}
    assert fields.keys() == {
        "metadata.name",
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    }
    assert fields["metadata.name"].startswith("must be a DNS label")
