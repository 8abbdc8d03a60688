"""Strict input (issue 21, case 8): what used to be guessed at is refused, naming the field.

The API in-process over a real Redis, with auth on: a YAML submission that names a key twice is 422
naming the key and its line (it used to keep the last one); `gpus` and `pods` given as a string or a
boolean are 422 naming the field (they used to be read as numbers).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from tests.integration.test_public_routes import write_tokens
from tests.integration.test_tenancy import Api
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[Api]:
    store = RedisStateStore(redis_url, prefix="strict" + uuid.uuid4().hex[:8])
    service = BrokerService(store, RecordingGateway(), ManualClock(), {"c1": ClusterTraits("c1")})
    yield Api(service, write_tokens(tmp_path))
    store.close()


def test_a_yaml_key_given_twice_is_refused_naming_it(api: Api) -> None:
    body = "name: twice\ngpus: 1\npods: 1\ngpus: 8\n"
    r = api.call("root", "POST", "/v1/jobs", headers={"Content-Type": "application/yaml"}, content=body)
    assert r.status_code == 422, r.text
    assert "duplicate key 'gpus' (line 4)" in r.json()["message"]


@pytest.mark.parametrize(("field", "value"), [("gpus", "2"), ("gpus", True), ("pods", "2"), ("pods", True)])
def test_a_number_given_as_a_string_or_a_boolean_is_refused_naming_the_field(
    api: Api, field: str, value: object
) -> None:
    body = {"name": "strict", "gpus": 1, field: value}
    r = api.call("root", "POST", "/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    assert [f["field"] for f in r.json()["fields"]] == [field], r.text
    ok = api.call("root", "POST", "/v1/jobs", json={"name": "strict", "gpus": 2, "pods": 2})
    assert ok.status_code == 201, ok.text


def test_a_json_key_given_twice_is_refused_naming_it(api: Api) -> None:
    """Issue 48 finding 10: JSON kept the last of two `gpus` silently, YAML refused."""
    body = b'{"name": "twice", "gpus": 1, "gpus": 8}'
    r = api.call("root", "POST", "/v1/jobs", headers={"Content-Type": "application/json"}, content=body)
    assert r.status_code == 422, r.text
    assert "duplicate key 'gpus'" in r.json()["message"], r.text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("durationSeconds", "10"),
        ("cpu", "2"),
        ("memoryGiB", True),
        ("maxWaitSeconds", "60"),
        ("allowBurst", "true"),
        ("numaAligned", 1),
    ],
)
def test_json_strings_for_numbers_and_booleans_are_refused_naming_the_field(
    api: Api, field: str, value: object
) -> None:
    """Issue 48 finding 10: `"durationSeconds": "10"` and `"allowBurst": "true"` used to be converted."""
    r = api.call("root", "POST", "/v1/jobs", json={"name": "strict", "gpus": 1, field: value})
    assert r.status_code == 422, r.text
    assert [f["field"] for f in r.json()["fields"]] == [field], r.text


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", '"true"'])
def test_yaml_1_1_booleans_and_quoted_true_are_refused_naming_the_field(api: Api, word: str) -> None:
    body = f"name: strict\ngpus: 1\nallowBurst: {word}\n"
    r = api.call("root", "POST", "/v1/jobs", headers={"Content-Type": "application/yaml"}, content=body)
    assert r.status_code == 422, r.text
    assert [f["field"] for f in r.json()["fields"]] == ["allowBurst"], r.text
    ok = "name: strict\ngpus: 1\nallowBurst: true\ndurationSeconds: 10\nlabels: {enabled: yes}\n"
    r = api.call("root", "POST", "/v1/jobs", headers={"Content-Type": "application/yaml"}, content=ok)
    assert r.status_code == 201, r.text  # a label value `yes` is the string it reads as
    assert r.json()["request"]["labels"] == {"enabled": "yes"}
