"""A request too large for a member cluster's API server (issue 21, case 3).

kubesim refuses what a real API server refuses: an object whose annotations together exceed 256 KiB,
with the API server's message, through the official client over HTTPS. The broker never accepts a
submit whose Job no API server would take: over its annotation budget it answers 413 naming the field
that makes it large; a large request within the budget is accepted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.integration.test_public_routes import write_tokens
from tests.integration.test_tenancy import Api
from tests.k8s_fields import sent_as
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.BatchV1Api]:
    world = synthetic_fleet(1, 1, gpus_per_node=8)
    with Simulation(world, tmp_path_factory.mktemp("limits"), speed=0, controllers=False) as sim:
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(sim.kubeconfig_path(world.clusters[0].name)), persist_config=False
        )
        yield client.BatchV1Api(api)
        api.close()


def _job(name: str, annotations: dict[str, str]) -> client.V1Job:
    container = {"name": "main", "image": "busybox", "command": ["true"]}
    manifest: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }
    return sent_as(client.V1Job, manifest)


def test_kubesim_refuses_annotations_over_256_kib_with_the_api_servers_message(
    batch: client.BatchV1Api,
) -> None:
    with pytest.raises(ApiException) as refused:
        batch.create_namespaced_job("default", _job("too-big", {"gpufed.io/request": "x" * (256 * 1024)}))
    assert refused.value.status == 422
    status = json.loads(refused.value.body or "{}")
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in status["message"]
    assert status["details"]["causes"][0]["reason"] == "FieldValueTooLong"
    # Just under the limit, keys and values counted together, is fine.
    batch.create_namespaced_job("default", _job("fits", {"a": "x" * (256 * 1024 - 1)}))


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[Api]:
    store = RedisStateStore(redis_url, prefix="limits" + uuid.uuid4().hex[:8])
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    yield Api(service, write_tokens(tmp_path))
    store.close()


def test_a_submit_over_the_annotation_budget_is_413_naming_the_field(api: Api) -> None:
    big = ["x" * 30_000] * 16  # ~480 KB of command: the probe's 500 KB request
    r = api.call("root", "POST", "/v1/jobs", json={"name": "huge", "gpus": 1, "command": big})
    assert r.status_code == 413, r.text
    assert r.json()["fields"][0]["field"] == "command"
    assert "262144 bytes" in r.json()["message"]
    fits = ["x" * 30_000] * 5  # ~150 KB: large, but within what a member cluster takes
    r = api.call("root", "POST", "/v1/jobs", json={"name": "large", "gpus": 1, "command": fits})
    assert r.status_code == 201, r.text
