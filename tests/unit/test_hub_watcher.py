"""The hub watcher's own logic (adapters.hub_watcher, docs/hub.md): which objects the cache keeps and what
it reports (a relist that lost an object is a delete; a namespaced relist only speaks for its namespace),
and discovery: a kind the hub does not serve is said once and followed as soon as it is served.

The hub here is a stub of the three calls discovery and the informers make (GET a group version, list,
watch); tests/integration/test_hub_kubectl.py runs the watcher against kubesim over HTTPS."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest

from adapters.hub_watcher import HubCache, HubWatcher
from adapters.kube_informer import SYNCED, WatchSettings
from adapters.kube_rest import ApiStatus, KubeRest
from broker.workload import hub_objects as hub
from tests.conftest import poll_for

JOB = hub.BATCH_JOB
JOBSET = hub.WATCHED_KINDS[1]


def obj(name: str, namespace: str = "team-a", managed: bool = True, rv: str = "1") -> dict[str, Any]:
    spec = {"managedBy": hub.MANAGED_BY} if managed else {}
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}", "resourceVersion": rv},
        "spec": spec,
    }


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, kind: hub.WatchedKind, type_: str, o: dict[str, Any]) -> None:
        self.events.append((type_, o["metadata"]["name"]))


def test_the_cache_keeps_managed_objects_only_and_a_relist_that_lost_one_is_a_delete() -> None:
    seen = Seen()
    cache = HubCache(JOB, seen)
    cache.replace("hub-jobs.batch", [obj("a"), obj("theirs", managed=False)], "10")
    assert seen.events == [("MODIFIED", "a")]
    assert [o["metadata"]["name"] for o in cache.objects()] == ["a"]
    cache.apply("hub-jobs.batch", "ADDED", obj("b"), "11")
    cache.apply("hub-jobs.batch", "MODIFIED", obj("theirs", managed=False, rv="12"), "12")
    cache.apply("hub-jobs.batch", "DELETED", obj("theirs", managed=False), "13")
    assert seen.events[1:] == [("ADDED", "b")]
    cache.replace("hub-jobs.batch", [obj("b")], "20")  # "a" went while the watch was down; "b" unchanged
    assert seen.events[2:] == [("DELETED", "a")]
    cache.apply("hub-jobs.batch", "DELETED", obj("b"), "21")
    assert seen.events[3:] == [("DELETED", "b")] and cache.objects() == []


def test_a_namespaced_relist_speaks_for_its_namespace_only() -> None:
    seen = Seen()
    cache = HubCache(JOB, seen)
    cache.expect("hub-jobs.batch@team-a")
    cache.expect("hub-jobs.batch@team-b")
    cache.replace("hub-jobs.batch@team-a", [obj("a", "team-a")], "1")
    cache.report("hub-jobs.batch@team-a", SYNCED)
    assert not cache.synced  # team-b's informer has not listed yet
    cache.replace("hub-jobs.batch@team-b", [obj("b", "team-b")], "1")
    cache.report("hub-jobs.batch@team-b", SYNCED)
    assert cache.synced
    cache.replace("hub-jobs.batch@team-a", [], "2")
    assert seen.events[-1] == ("DELETED", "a")
    assert [o["metadata"]["name"] for o in cache.objects()] == ["b"]


class StubHubWatches:
    """The hub's lists and watches as the informers make them (adapters.kube_async): empty and quiet."""

    async def list_pages(
        self, path: str, page_size: int, timeout: Any, selector: Sequence[Any] = ()
    ) -> tuple[list[dict[str, Any]], str]:
        return [], "1"

    async def open_watch(
        self, path: str, resource_version: str, timeout_seconds: int, read_timeout: float, selector: Any = ()
    ) -> None:
        await asyncio.sleep(0.05)  # a quiet watch that ends now and then

    async def events(
        self, resp: None, path: str, read_timeout: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        events: list[dict[str, Any]] = []
        for event in events:
            yield event


class StubHub:
    """The hub's discovery, list and watch, nothing else: `served` maps a group version to its plurals."""

    cluster = "hub"

    def __init__(self) -> None:
        self.served: dict[str, list[str]] = {"batch/v1": ["jobs", "cronjobs"]}
        self.quiet = threading.Event()

    def request(
        self, method: str, path: str, query: Sequence[Any] = (), body: Any = None, timeout: Any = None
    ) -> dict[str, Any]:
        group_version = path.removeprefix("/apis/")
        if method == "GET" and group_version in self.served:
            return {"resources": [{"name": n} for n in self.served[group_version]]}
        raise ApiStatus("hub", 404, "NotFound", f"{path} not found")

    @property
    def aio(self) -> StubHubWatches:
        return StubHubWatches()

    def close(self) -> None:
        return None


def test_a_kind_not_served_is_said_once_and_followed_once_it_is(caplog: pytest.LogCaptureFixture) -> None:
    stub = StubHub()
    rest: KubeRest = stub  # type: ignore[assignment]
    watcher = HubWatcher(rest, Seen(), settings=WatchSettings(watch_timeout_s=1))
    try:
        with caplog.at_level(logging.INFO, logger="adapters.hub_watcher"):
            assert watcher.discover_once() == [JOB]
            assert watcher.discover_once() == []
        skipped = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
        assert len(skipped) == len(hub.WATCHED_KINDS) - 1  # once per kind, not once per round
        assert "hub: jobset.x-k8s.io/v1alpha2 JobSet is not served; skipped" in skipped[0]
        poll_for("batch/v1 Jobs synced", lambda: watcher.synced(JOB) or None, 10)
        assert not watcher.synced(JOBSET)
        stub.served["jobset.x-k8s.io/v1alpha2"] = ["jobsets"]  # the JobSet CRD is installed
        assert watcher.discover_once() == [JOBSET]
        poll_for("JobSets synced", lambda: watcher.synced(JOBSET) or None, 10)
    finally:
        watcher.stop()
