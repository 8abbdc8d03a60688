"""The batch commands of `gpufed` (issue 46) against the API served over real HTTP (uvicorn in a thread),
the service in-process on real Redis: arrays, dependencies, dry run, several jobs at once, --all, hold,
release, groups, tenants.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml

from adapters.redis_store import RedisStateStore
from broker.cli import run as gpufed
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.model import ClusterTraits, JobState
from broker.queue import queueing
from tests.conftest import free_port, wait_for
from tests.integration.test_tenancy import TOKENS, Api, h100_cluster
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture
def service(redis_url: str) -> Iterator[BrokerService]:
    store = RedisStateStore(redis_url, prefix="batchcli" + uuid.uuid4().hex[:8])
    policy = queueing.QueuePolicy(tenants={"ml-research": queueing.TenantPolicy(quotas={"H100-80GB": 8})})
    svc = BrokerService(
        store,
        RecordingGateway(),
        ManualClock(),
        {"c1": ClusterTraits("c1")},
        settings=ServiceSettings(queue=policy),
    )
    store.put_summary(h100_cluster("c1", 2))
    yield svc
    store.close()


@pytest.fixture
def served(service: BrokerService, tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "tokens.yaml"
    path.write_text(
        yaml.safe_dump([{"name": "alice", "tenant": "ml-research", "role": "user", "token": TOKENS["alice"]}])
    )
    api = Api(service, path)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(api.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="the API to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def cli(served: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GPUFED_CONFIG", "/dev/null")
    monkeypatch.setenv("GPUFED_URL", served)
    monkeypatch.setenv("GPUFED_TOKEN", TOKENS["alice"])

    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = gpufed(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def test_an_array_a_dependency_and_several_jobs_at_once(cli: Any, service: BrokerService) -> None:
    code, out, _ = cli("submit", "sweep", "--gpus", "1", "--array", "0-3%2", "-o", "json")
    assert code == 0
    members = json.loads(out)["items"]
    assert [m["name"] for m in members] == [f"sweep-{i}" for i in range(4)]
    code, out, _ = cli(
        "submit", "report", "--gpus", "1", "--depends-on", "finished:group/sweep", "-o", "json"
    )
    assert code == 0 and json.loads(out)["state"] == "PENDING"
    assert "waiting for group sweep (0 of 4 done) to be finished" in json.loads(out)["reason"]

    code, out, _ = cli("get", "sweep-0", "sweep-1", "-o", "json")
    assert code == 0 and [j["name"] for j in json.loads(out)["items"]] == ["sweep-0", "sweep-1"]
    code, out, _ = cli("get", "--group", "sweep")
    assert code == 0 and out.count("sweep-") == 4
    code, out, _ = cli("groups")
    assert code == 0 and "sweep" in out and "QUEUED=4" in out

    code, _, err = cli("cancel", "--all")  # no terminal to ask on: --yes is needed
    assert code == 2 and "--yes" in err
    code, out, _ = cli("cancel", "sweep-0", "sweep-1")
    assert code == 0 and out.count("CANCELLED") == 2
    code, out, _ = cli("cancel", "--all", "--yes")
    assert code == 0 and out.count("CANCELLED") == 3  # the live ones only
    assert {str(r.state) for r in service.store.list_jobs()} == {"CANCELLED"}
    code, out, _ = cli("watch", "--group", "sweep")  # every member has ended: each said once, exit 1
    assert code == 1 and out.count("CANCELLED") == 4 and out.count("sweep-") == 4


def test_dry_run_hold_release_and_tenants(cli: Any, service: BrokerService) -> None:
    code, out, _ = cli("submit", "probe", "--gpus", "2", "--dry-run")
    assert code == 0 and "dry run: would be placed on c1 (H100-80GB)" in out and "nothing was created" in out
    assert service.store.list_jobs() == []
    # nothing was created: no job id, no state the job does not have (it is not QUEUED anywhere)
    assert "QUEUED" not in out and "waiting for placement" not in out and " j" not in out.split("\n")[1]
    assert out.split("\n")[1].split()[:3] == ["probe", "ml-research", "2x1"]

    code, out, _ = cli("submit", "later", "--gpus", "1", "-o", "json")
    job = json.loads(out)["id"]
    code, out, _ = cli("hold", "later")
    assert code == 0 and "held by alice" in out
    service.release_dependents()
    service.schedule_once()
    assert service.get(job).state is JobState.PENDING
    code, out, _ = cli("release", job)
    assert code == 0 and "released by alice" in out
    service.release_dependents()
    service.schedule_once()
    assert service.get(job).state is JobState.PLACED

    code, out, _ = cli("tenants")
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split()[:5] == ["TENANT", "#", "SHARE", "USED/QUOTA", "BORROWED"]
    assert row.split()[:4] == ["ml-research", "1", "0.06", "H100-80GB=1/8"]
