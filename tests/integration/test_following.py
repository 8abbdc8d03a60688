"""A user's day on the real broker: a plain Job YAML through `gpufed submit -f -`, followed with `--wait`,
`wait`, `watch`, `logs -f`, and the CLI's answers when things go wrong (one line, an exit code).

The demo fleet in kubesim over HTTPS, a private Redis, the broker on a free port (the walking skeleton's
fixtures); the CLI runs in-process through broker.cli.cli.run, the Job is read back with the official client.
"""

from __future__ import annotations

import io
import json
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from httpx_sse import connect_sse
from kubernetes import client, config

from broker import cli
from broker.app import demo
from broker.app import main as composition
from broker.app.demo import write_demo_config
from broker.config.settings import load_fleet_config
from kubesim.certs import make_cluster_tls
from kubesim.sim import Simulation
from tests.conftest import free_port, wait_for
from tests.integration import test_walking_skeleton as skeleton
from tests.integration.test_walking_skeleton import broker_url, sim  # noqa: F401  (module fixtures)
from tests.k8s_fields import present

pytestmark = pytest.mark.integration

PLAIN_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  creationTimestamp: null
  annotations:
    gpufed.io/gpu-products: A100-80GB
spec:
  template:
    metadata:
      annotations:
        sim.gpufed.io/duration-seconds: "{seconds}"
        sim.gpufed.io/exit-code: "{exit_code}"
    spec:
      restartPolicy: Never
      containers:
      - name: train
        image: ghcr.io/example/train:1.2
        command: [python, train.py]
        args: [--epochs, "3"]
        env:
        - name: EPOCHS
          value: "3"
        - name: TOKEN
          valueFrom:
            secretKeyRef: {{name: hub, key: token}}
        resources:
          limits:
            nvidia.com/gpu: 1
status: {{}}
"""


def _plain_job(name: str, seconds: int = 30, exit_code: int = 0) -> str:
    return PLAIN_JOB.format(name=name, seconds=seconds, exit_code=exit_code)


def auth() -> dict[str, str]:
    """The skeleton broker's admin header once tenancy (auth on, wip-10a) is in; empty before it."""
    return dict(getattr(skeleton, "AUTH", {}))


def gpufed(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *argv: str,
    stdin: str | None = None,
) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    token = auth().get("Authorization", "").removeprefix("Bearer ")
    if token and "GPUFED_TOKEN" not in os.environ:  # a test's own broker sets its own
        monkeypatch.setenv("GPUFED_TOKEN", token)
    capsys.readouterr()
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=auth()).json()
    return body


def test_a_plain_job_yaml_runs_in_a_member_cluster_with_its_template_intact(
    sim: Simulation,  # noqa: F811
    broker_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = gpufed(
        capsys, monkeypatch, "submit", "-f", "-", "-o", "json", "--server", broker_url,
        stdin=_plain_job("plain-job", seconds=600),
    )  # fmt: skip
    assert code == 0, err
    job_id = json.loads(out)["id"]
    running = wait_for(
        lambda: (j := _job(broker_url, job_id))["state"] == "RUNNING" and j, timeout=60, what="RUNNING"
    )
    assert isinstance(running, dict)
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(running["cluster"])), persist_config=False
    )
    jobs = client.BatchV1Api(api).list_namespaced_job("default", label_selector=f"gpufed.io/job-id={job_id}")
    assert len(jobs.items) == 1
    pod = present(present(jobs.items[0].spec, "spec").template.spec, "pod spec")
    container = pod.containers[0]
    assert container.image == "ghcr.io/example/train:1.2"
    assert container.command == ["python", "train.py"]
    assert container.args == ["--epochs", "3"]
    env = {e.name: e for e in container.env or []}
    assert env["EPOCHS"].value == "3"
    ref = present(present(env["TOKEN"].value_from, "valueFrom").secret_key_ref, "secretKeyRef")
    assert (ref.name, ref.key) == ("hub", "token")
    assert present(present(container.resources, "resources").limits, "limits")["nvidia.com/gpu"] == "1"

    # logs -f of the running job: streams until the container exits (the simulated 600 s pass in ~12 s)
    code, out, err = gpufed(capsys, monkeypatch, "logs", job_id, "-f", "--server", broker_url)
    assert code == 0, err
    assert 'container "main" started (image ghcr.io/example/train:1.2)' in out
    assert "exited with code 0" in out.splitlines()[-1]

    code, out, err = gpufed(capsys, monkeypatch, "wait", job_id, "--server", broker_url, "--timeout", "120")
    assert code == 0, err
    assert "SUCCEEDED" in out


def test_wait_exits_with_the_result_of_the_job(
    broker_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = gpufed(
        capsys, monkeypatch, "submit", "-f", "-", "--wait", "--timeout", "120", "-o", "json",
        "--server", broker_url, stdin=_plain_job("fails", seconds=20, exit_code=3),
    )  # fmt: skip
    assert code == 1 and out.startswith("{"), (out, err)
    assert json.loads(out)["state"] == "FAILED"  # stdout: the job once, as it ended
    assert "QUEUED" in err  # the progress line (stderr) showed the way there

    code, out, err = gpufed(
        capsys, monkeypatch, "submit", "ok-by-flags", "--product", "A100-80GB", "--duration", "20",
        "--image", "busybox:1.36", "--command", "sh -c 'echo hi'", "--env", "A=1", "--wait",
        "--timeout", "120", "--server", broker_url,
    )  # fmt: skip
    assert code == 0, err
    assert "SUCCEEDED" in out

    # by name, and a cancelled job is not a success
    code, out, _ = gpufed(
        capsys, monkeypatch, "submit", "never-fits", "--gpus", "64", "-o", "json", "--server", broker_url
    )
    assert code == 0
    job_id = json.loads(out)["id"]
    code, out, err = gpufed(capsys, monkeypatch, "cancel", "never-fits", "--server", broker_url)
    assert code == 0, err
    code, out, err = gpufed(capsys, monkeypatch, "wait", job_id, "--server", broker_url)
    assert code == 1 and "CANCELLED" in out


def test_the_sse_stream_delivers_every_transition_in_order(broker_url: str) -> None:  # noqa: F811
    fleet_events: list[dict[str, Any]] = []
    fleet_open = threading.Event()
    job_ids: list[str] = []

    def follow_fleet() -> None:
        with (
            httpx.Client(base_url=broker_url, timeout=httpx.Timeout(10, read=60), headers=auth()) as c,
            connect_sse(c, "GET", "/v1/events", params={"watch": "1"}) as source,
        ):
            fleet_open.set()
            for sse in source.iter_sse():
                event = json.loads(sse.data)
                fleet_events.append(event)  # every job's: filtered below (our id may not be known yet)
                if job_ids and event["jobId"] == job_ids[0] and event["state"] in ("SUCCEEDED", "FAILED"):
                    return

    reader = threading.Thread(target=follow_fleet, daemon=True)
    reader.start()
    assert fleet_open.wait(30)
    r = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "sse", "gpus": 1, "gpuProducts": ["A100-80GB"], "durationSeconds": 20},
        headers=auth(),
    )
    job_ids.append(r.json()["id"])
    streamed = []
    ids = []
    with (
        httpx.Client(base_url=broker_url, timeout=httpx.Timeout(10, read=60), headers=auth()) as c,
        connect_sse(c, "GET", f"/v1/jobs/{job_ids[0]}/events", params={"watch": "1"}) as source,
    ):
        for sse in source.iter_sse():  # the stream ends after the terminal transition
            assert sse.event == "transition" and sse.id
            streamed.append(json.loads(sse.data))
            ids.append(sse.id)
    stored = httpx.get(f"{broker_url}/v1/jobs/{job_ids[0]}/events", headers=auth()).json()["items"]
    assert [e["state"] for e in streamed] == [e["state"] for e in stored]
    assert streamed[0]["state"] == "QUEUED" and streamed[-1]["state"] == "SUCCEEDED"
    assert [e["at"] for e in streamed] == sorted(e["at"] for e in streamed)
    reader.join(timeout=60)
    ours = [e for e in fleet_events if e["jobId"] == job_ids[0]]
    assert [e["state"] for e in ours] == [e["state"] for e in streamed]

    # a client that lost the stream resumes after the last event it saw (what `gpufed watch` does)
    with (
        httpx.Client(base_url=broker_url, timeout=httpx.Timeout(10, read=60), headers=auth()) as c,
        connect_sse(
            c,
            "GET",
            f"/v1/jobs/{job_ids[0]}/events",
            params={"watch": "1"},
            headers={"Last-Event-ID": ids[1]},
        ) as source,
    ):
        resumed = [json.loads(sse.data)["state"] for sse in source.iter_sse()]
    assert resumed == [e["state"] for e in streamed[2:]]


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["get", "no-such-job"], 1, "no job with id or name 'no-such-job'"),
        (["submit", "Bad_Name"], 1, "422"),
        (["explain", "--gpus", "64"], 1, "0/3 clusters are available"),
        (["jobs", "-o", "xml"], 2, "'xml' is not one of"),
        (["submit", "dup", "--gpus", "64"], 0, ""),
        (
            ["submit", "dup", "--gpus", "64"],
            1,
            "409 a job named 'dup' already exists",
        ),  # kubectl's AlreadyExists
        (["get", "dup"], 0, "dup"),  # one live job holds the name
    ],
)
def test_the_cli_answers_errors_from_the_broker_in_one_line_with_an_exit_code(
    broker_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    code: int,
    says: str,
) -> None:
    got, out, err = gpufed(capsys, monkeypatch, *argv, "--server", broker_url)
    assert got == code, (out, err)
    assert len(err.strip().splitlines()) <= 1, err  # never a traceback, never doubled
    assert says in out + err


def test_reads_in_yaml_and_a_body_over_the_limit(
    broker_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, _ = gpufed(capsys, monkeypatch, "jobs", "-o", "yaml", "--server", broker_url)
    assert code == 0
    assert isinstance(yaml.safe_load(out)["items"], list)
    code, out, _ = gpufed(capsys, monkeypatch, "fleet", "-o", "json", "--server", broker_url)
    assert code == 0 and len(json.loads(out)["clusters"]) == 3
    r = httpx.post(f"{broker_url}/v1/jobs", content=b'{"name": "' + b"x" * (2 << 20) + b'"}', headers=auth())
    assert r.status_code == 413
    assert "limit" in r.json()["message"]


def test_the_broker_serves_https_with_tls_cert_and_key(
    sim: Simulation,  # noqa: F811
    redis_url: str,
    ray_session: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tls = make_cluster_tls("gpufed-broker", tmp_path)
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    cfg = load_fleet_config(write_demo_config(tmp_path, kubeconfigs, redis_url, "gpufed-tls"))
    port = free_port()
    with composition.running_broker(cfg, port=port, tls_cert=tls.cert_path, tls_key=tls.key_path):
        url = f"https://127.0.0.1:{port}"
        assert httpx.get(f"{url}/healthz", verify=ssl.create_default_context(cafile=tls.ca_path)).json() == {
            "status": "ok"
        }
        with pytest.raises(httpx.HTTPError):  # not plain HTTP
            httpx.get(f"http://127.0.0.1:{port}/healthz")
        # the CLI trusts it through a context's certificateAuthority (as a kubeconfig does)
        config_file = tmp_path / "config.yaml"
        config_file.write_text(
            yaml.safe_dump(
                {
                    "current-context": "tls",
                    "contexts": [{"name": "tls", "server": url, "certificateAuthority": str(tls.ca_path)}],
                }
            )
        )
        monkeypatch.setenv("GPUFED_CONFIG", str(config_file))
        read_tokens = getattr(demo, "read_demo_tokens", None)  # auth on (wip-10a): the demo's admin
        if read_tokens is not None:
            monkeypatch.setenv("GPUFED_TOKEN", read_tokens(tmp_path)["admin"])
        code, out, err = gpufed(capsys, monkeypatch, "clusters", "-o", "json")
        assert code == 0, err
        assert len(json.loads(out)["items"]) == 3


def test_gpufed_watch_streams_a_jobs_transitions_and_exits_with_its_result(
    broker_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, _ = gpufed(
        capsys, monkeypatch, "submit", "watched", "--product", "A100-80GB", "--duration", "20", "-o", "json",
        "--server", broker_url,
    )  # fmt: skip
    assert code == 0
    job_id = json.loads(out)["id"]
    code, out, err = gpufed(capsys, monkeypatch, "watch", "watched", "-o", "json", "--server", broker_url)
    assert code == 0, err
    states = [json.loads(line)["state"] for line in out.splitlines()]
    stored = httpx.get(f"{broker_url}/v1/jobs/{job_id}/events", headers=auth()).json()["items"]
    assert states == [e["state"] for e in stored]
    assert states[0] == "QUEUED" and states[-1] == "SUCCEEDED"


INDEXED_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: ddp
  annotations:
    gpufed.io/gpu-products: A100-80GB
spec:
  completionMode: Indexed
  parallelism: 2
  completions: 2
  backoffLimit: 0
  template:
    metadata:
      annotations:
        sim.gpufed.io/duration-seconds: "30"
    spec:
      restartPolicy: Never
      containers:
      - name: worker
        image: pytorch/pytorch:2.5.0-cuda12.4-cudnn9-runtime
        command: [torchrun, --nnodes=2, --node-rank=$(JOB_COMPLETION_INDEX), train.py]
        resources:
          limits:
            nvidia.com/gpu: 1
"""


def test_a_pytorch_style_indexed_job_runs_as_a_gang_and_its_logs_name_each_pod(
    sim: Simulation,  # noqa: F811
    broker_url: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = gpufed(
        capsys, monkeypatch, "submit", "-f", "-", "--wait", "--timeout", "120", "-o", "json",
        "--server", broker_url, stdin=INDEXED_JOB,
    )  # fmt: skip
    assert code == 0, err
    done = json.loads(out)
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(done["cluster"])), persist_config=False
    )
    jobs = client.BatchV1Api(api).list_namespaced_job(
        "default", label_selector=f"gpufed.io/job-id={done['id']}"
    )
    spec = present(jobs.items[0].spec, "spec")
    assert (spec.completion_mode, spec.parallelism, spec.completions) == ("Indexed", 2, 2)
    container = present(spec.template.spec, "pod spec").containers[0]
    assert present(container.command, "command")[2] == "--node-rank=$(JOB_COMPLETION_INDEX)"

    code, out, err = gpufed(capsys, monkeypatch, "logs", "ddp", "--server", broker_url)
    assert code == 0, err
    pods = {line.split("]")[0].lstrip("[") for line in out.splitlines()}
    assert len(pods) == 2 and all(p.startswith(done["workload"]) for p in pods), out


def test_shell_completion_offers_the_brokers_job_names(broker_url: str) -> None:  # noqa: F811
    r = httpx.post(f"{broker_url}/v1/jobs", json={"name": "complete-me", "gpus": 64}, headers=auth())
    assert r.status_code == 201
    env = {
        **os.environ,
        "GPUFED_URL": broker_url,
        "GPUFED_TOKEN": auth().get("Authorization", "").removeprefix("Bearer "),
        "_GPUFED_COMPLETE": "complete_bash",
        "COMP_WORDS": "gpufed logs complete-",
        "COMP_CWORD": "2",
    }
    done = subprocess.run(
        [sys.executable, "-m", "broker.cli"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "complete-me" in done.stdout.split()


def test_a_finished_jobs_log_is_kept_after_its_job_is_removed_and_other_attempts_say_so(
    sim: Simulation,  # noqa: F811
    broker_url: str,  # noqa: F811
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 45: once the member removed a finished Job (finishedJobTtlSeconds), `gpufed logs` said "has no
    pods ... yet (SUCCEEDED)". The attempt's log is kept when it ends, and read back after."""
    code, out, err = gpufed(
        capsys, monkeypatch, "submit", "-f", "-", "--wait", "--timeout", "120", "-o", "json",
        "--server", broker_url, stdin=_plain_job("ttl-gone", seconds=20),
    )  # fmt: skip
    assert code == 0, err
    done = json.loads(out)
    kept = redis.Redis.from_url(redis_url)
    wait_for(  # kept by the status sync once it wrote the end (the member keeps the Job an hour)
        lambda: kept.hexists(f"gpufed-skeleton:attempt-logs:{done['id']}", str(done["attempt"])),
        timeout=30,
        interval=0.2,
        what="the attempt's log kept",
    )
    kept.close()
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(done["cluster"])), persist_config=False
    )
    selector = f"gpufed.io/job-id={done['id']}"
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    for job in batch.list_namespaced_job("default", label_selector=selector).items:  # as its TTL would
        batch.delete_namespaced_job(
            str(present(job.metadata, "metadata").name), "default", propagation_policy="Background"
        )
    wait_for(
        lambda: not core.list_namespaced_pod("default", label_selector=selector).items,
        timeout=60,
        interval=0.5,
        what="its pods gone with the Job",
    )
    code, out, err = gpufed(capsys, monkeypatch, "logs", done["id"], "--server", broker_url)
    assert code == 0, err
    assert 'container "main" started (image ghcr.io/example/train:1.2)' in out
    assert "exited with code 0" in out
    code, _, err = gpufed(capsys, monkeypatch, "logs", done["id"], "--attempt", "7", "--server", broker_url)
    assert code == 1 and f"no log of attempt 7 of job {done['id']} was kept" in err, err
