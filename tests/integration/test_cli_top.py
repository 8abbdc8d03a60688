"""`gpufed top` against the real API (the app served over HTTP, real Redis, a real scheduling pass):
clusters and tenants by GPUs in use, busiest first, as a table and as JSON/YAML."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import uvicorn
import yaml

from adapters.redis_store import RedisStateStore
from broker import cli
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobRequest, JobState
from tests.conftest import free_port, wait_for
from tests.integration.test_tenancy import TOKENS, Api, h100_cluster, store, tokens_file
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration
__all__ = ["store", "tokens_file"]  # the fixtures, from test_tenancy


@pytest.fixture
def served(store: RedisStateStore, tokens_file: Path) -> Iterator[str]:
    """Two clusters (c1: 3 idle 8-GPU H100 nodes, c2: 1), three tenants' jobs after one scheduling pass
    (ml-research 2x8 GPUs, vision 8, robotics 64: never placed), and what the pollers then report:
    c1 with 24 GPUs in use (16 of them other pods'), c2 with 0; the API served on a free port."""
    clock = ManualClock()
    store.put_summary(h100_cluster("c1", nodes=3))
    store.put_summary(h100_cluster("c2", nodes=1))
    traits = {"c1": ClusterTraits("c1"), "c2": ClusterTraits("c2")}
    service = BrokerService(store, RecordingGateway(), clock, traits)
    ids: dict[str, str] = {}
    for name, tenant, gpus, pods in (
        ("a", "ml-research", 8, 2),
        ("b", "vision", 8, 1),
        ("c", "robotics", 8, 8),
    ):
        record, _ = service.submit(
            JobRequest(name=name, tenant=tenant, gpus_per_pod=gpus, pods=pods, gpu_products=("H100-80GB",))
        )
        ids[name] = record.id
        clock.t += 1
    service.schedule_once()
    states = {name: service.get(i).state for name, i in ids.items()}
    assert states == {"a": JobState.PLACED, "b": JobState.PLACED, "c": JobState.QUEUED}
    c1 = h100_cluster("c1", nodes=3)
    store.put_summary(replace(c1, products=(replace(c1.products[0], allocated=24, free=0),)))
    api = Api(service, tokens_file)
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


def _top(url: str, *args: str) -> list[str]:
    return ["top", "--server", url, "--token", TOKENS["root"], *args]


def test_top_lists_clusters_and_tenants_by_gpus_in_use(
    served: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFED_CONFIG", "/dev/null")
    assert cli.run(_top(served, "-o", "json")) == 0
    view = json.loads(capsys.readouterr().out)
    assert [
        (c["cluster"], c["gpusInUse"], c["gpusAllocatable"], c["percentInUse"]) for c in view["clusters"]
    ] == [
        ("c1", 24, 24, 100),
        ("c2", 0, 8, 0),
    ]
    assert sum(c["jobGpus"] for c in view["clusters"]) == 24 and sum(c["jobs"] for c in view["clusters"]) == 2
    assert [(t["tenant"], t["jobs"], t["gpus"]) for t in view["tenants"]] == [
        ("ml-research", 1, 16),
        ("vision", 1, 8),
    ]

    assert cli.run(_top(served, "-o", "yaml")) == 0
    assert yaml.safe_load(capsys.readouterr().out) == view

    assert cli.run(_top(served)) == 0
    table = capsys.readouterr().out
    assert "clusters by GPUs in use" in table and "tenants by GPUs in use" in table
    assert table.index("ml-research") < table.index("vision") and "robotics" not in table
    assert "24/24" in table and "100%" in table


def test_a_user_sees_only_its_own_tenant(
    served: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFED_CONFIG", "/dev/null")
    assert cli.run(["top", "--server", served, "--token", TOKENS["alice"], "-o", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [t["tenant"] for t in view["tenants"]] == ["ml-research"]
