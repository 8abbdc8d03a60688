"""Paginated lists are a consistent snapshot: continue tokens are pinned to the first page's
resourceVersion, later pages show the list as of that version under concurrent writes, and a compacted
version is 410 Gone with the real message (and a token to go on inconsistently). Official Python client."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.k8s_fields import list_rv, meta, name_of, present, rv_of, sent_as

pytestmark = pytest.mark.integration

CLUSTER = "sim-000"
NS = "paging"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(synthetic_fleet(1, 1), tmp_path_factory.mktemp("kubesim-paging"), controllers=False) as s:
        s.call(lambda: s.store(CLUSTER).create("namespaces", {"metadata": {"name": NS}}))
        yield s


@pytest.fixture(scope="module")
def core(sim: Simulation) -> Iterator[client.CoreV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(str(sim.kubeconfig_path(CLUSTER)), client_configuration=cfg, persist_config=False)  # type: ignore[no-untyped-call]
    with client.ApiClient(cfg) as api:
        yield client.CoreV1Api(api)


def continue_of(lst: client.V1PodList) -> str | None:
    return present(lst.metadata, "metadata")._continue


def pod(name: str, colour: str = "red") -> client.V1Pod:
    return sent_as(
        client.V1Pod,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"colour": colour}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    )


def test_later_pages_show_the_list_as_of_the_first_page(core: client.CoreV1Api) -> None:
    for i in range(30):
        core.create_namespaced_pod(NS, pod(f"p-{i:02d}"))
    first = core.list_namespaced_pod(NS, limit=10)
    pinned = list_rv(first)
    token: str | None = present(continue_of(first), "metadata.continue")

    # concurrent writes after the first page: deletes and a change on later pages, new pods after them
    core.delete_namespaced_pod("p-15", NS)
    core.delete_namespaced_pod("p-29", NS)
    core.patch_namespaced_pod("p-20", NS, {"metadata": {"labels": {"colour": "blue"}}})
    for name in ("p-16a", "p-99"):
        core.create_namespaced_pod(NS, pod(name))

    names = [name_of(p) for p in first.items]
    while token:
        page = core.list_namespaced_pod(NS, limit=10, _continue=token)
        assert list_rv(page) == pinned
        for p in page.items:
            assert int(rv_of(p)) <= int(pinned)
            if name_of(p) == "p-20":
                assert present(meta(p).labels, "labels")["colour"] == "red"  # as it was at the pinned RV
        names += [name_of(p) for p in page.items]
        token = continue_of(page)
    assert names == [f"p-{i:02d}" for i in range(30)]

    # a fresh list sees the writes
    now = [name_of(p) for p in core.list_namespaced_pod(NS).items]
    assert "p-15" not in now and "p-99" in now and "p-16a" in now


def _more_writes(writes: list[int], failures: list[BaseException]) -> Callable[[], bool]:
    """A predicate: the writer has written twice more since now (or failed)."""
    target = writes[0] + 2
    return lambda: writes[0] >= target or bool(failures)


def test_pages_stay_consistent_while_another_client_writes_in_parallel(
    sim: Simulation, core: client.CoreV1Api
) -> None:
    ns = "paging-parallel"
    sim.call(lambda: sim.store(CLUSTER).create("namespaces", {"metadata": {"name": ns}}))
    for i in range(40):
        core.create_namespaced_pod(ns, pod(f"s-{i:02d}"))
    writes = [0]
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:  # its own connection: creates, relabels and deletes, as fast as it can
        cfg = client.Configuration()
        config.load_kube_config(
            str(sim.kubeconfig_path(CLUSTER)), client_configuration=cfg, persist_config=False
        )  # type: ignore[no-untyped-call]
        with client.ApiClient(cfg) as api:
            other = client.CoreV1Api(api)
            n = 0
            try:
                while not stop.is_set():
                    other.create_namespaced_pod(ns, pod(f"w-{n:04d}"))
                    # relabel s-00..s-19, delete s-39 down to s-20: every pod of the snapshot changes
                    other.patch_namespaced_pod(
                        f"s-{n % 20:02d}", ns, {"metadata": {"labels": {"colour": "blue"}}}
                    )
                    if n < 20:
                        other.delete_namespaced_pod(f"s-{39 - n:02d}", ns)
                    n += 1
                    writes[0] = n
            except BaseException as e:  # surfaced by the test, not lost in the thread
                failures.append(e)

    thread = threading.Thread(target=writer, daemon=True)
    first = core.list_namespaced_pod(ns, limit=7)
    pinned = list_rv(first)
    thread.start()
    try:
        seen = [name_of(p) for p in first.items]
        token = continue_of(first)
        while token:
            wait_for(_more_writes(writes, failures), timeout=30, what="writes between two pages")
            page = core.list_namespaced_pod(ns, limit=7, _continue=token)
            assert list_rv(page) == pinned
            for p in page.items:
                assert int(rv_of(p)) <= int(pinned)
                assert present(meta(p).labels, "labels")["colour"] == "red"  # as of the first page
            seen += [name_of(p) for p in page.items]
            token = continue_of(page)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures, failures
    assert seen == [f"s-{i:02d}" for i in range(40)]  # every pod of the snapshot, once, none written later
    assert writes[0] >= 10  # the writer really ran alongside the pages


def test_a_compacted_snapshot_is_410_gone_with_the_real_message(
    sim: Simulation, core: client.CoreV1Api
) -> None:
    first = core.list_namespaced_pod(NS, limit=5)
    token = continue_of(first)
    core.create_namespaced_pod(NS, pod("p-after-compaction"))
    sim.call(lambda: sim.store(CLUSTER).compact("pods"))
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, limit=5, _continue=token)
    assert err.value.status == 410
    body = json.loads(str(err.value.body))
    assert body["reason"] == "Expired"
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result. You can start a new "
        "list without the continue parameter, or use the continue token in this response"
    )
    # the token in the 410 goes on from the same place, with the current objects (an inconsistent list)
    rest = core.list_namespaced_pod(NS, _continue=body["metadata"]["continue"])
    names = [name_of(p) for p in rest.items]
    assert "p-after-compaction" in names and names == sorted(names)
    assert all(n > name_of(first.items[-1]) for n in names)
