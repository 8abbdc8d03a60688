"""kubesim's API over real HTTPS, through the official kubernetes Python client (one ApiClient per cluster).

The simulation runs without controllers so that every object and event here is one the test made.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.k8s_fields import as_dict, labels_of, list_rv, meta, name_of, present, rv_of, sent_as

pytestmark = pytest.mark.integration

NODES = 30
NS = "team-a"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(
        synthetic_fleet(2, NODES),
        tmp_path_factory.mktemp("kubesim"),
        controllers=False,
        bookmark_interval=0.3,
    ) as s:
        s.call(lambda: s.store("sim-000").create("namespaces", {"metadata": {"name": NS}}))
        yield s


def api_client(sim: Simulation, name: str = "sim-000", retries: bool | None = None) -> client.ApiClient:
    """One ApiClient for one cluster from its kubeconfig (retries=False: fail on the first error)."""
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(name)), client_configuration=cfg, persist_config=False
    )
    if retries is not None:
        cfg.retries = retries
    return client.ApiClient(cfg)


@pytest.fixture(scope="module")
def api(sim: Simulation) -> Iterator[client.ApiClient]:
    c = api_client(sim)
    yield c
    c.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def raw(
    sim: Simulation,
    method: str,
    path: str,
    body: Any = None,
    token: str | Literal[False] | None = None,
    headers: dict[str, str] | None = None,
    name: str = "sim-000",
    timeout: float = 10,
) -> tuple[int, dict[str, str], Any]:
    """A plain HTTPS request (status, headers, decoded JSON body or text); token=False sends none."""
    ctx = ssl.create_default_context(cafile=str(sim.ca_path(name)))
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(sim.server_url(name) + path, data=data, method=method)
    if token is not False:
        req.add_header("Authorization", f"Bearer {token or sim.token(name)}")
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            status, hdrs, text = resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, dict(e.headers), e.read().decode()
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, text


def error_body(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    """The Status object an ApiException carries, decoded."""
    return as_dict(json.loads(present(err.value.body, "ApiException.body")))


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"gpufed.io/job-id": name}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                }
            },
            **spec,
        },
    }


def pod_manifest(name: str, labels: dict[str, str], node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


# ------------------------------------------------------------------------------------------ discovery, auth


def test_discovery_serves_groups_versions_and_subresources(sim: Simulation) -> None:
    status, _, body = raw(sim, "GET", "/apis")
    assert status == 200
    groups = {g["name"]: [v["version"] for v in g["versions"]] for g in body["groups"]}
    assert groups["batch"] == ["v1"]
    assert groups["kueue.x-k8s.io"] == ["v1beta2", "v1beta1"]
    status, _, body = raw(sim, "GET", "/apis/batch/v1")
    names = {r["name"]: r for r in body["resources"]}
    assert names["jobs"]["namespaced"] is True and "watch" in names["jobs"]["verbs"]
    assert names["jobs/status"]["verbs"] == ["get", "patch", "update"]
    _, _, core = raw(sim, "GET", "/api/v1")
    core_names = {r["name"]: r for r in core["resources"]}
    assert core_names["nodes"]["shortNames"] == ["no"] and core_names["nodes"]["namespaced"] is False
    assert "pods/binding" in core_names
    status, headers, agg = raw(
        sim,
        "GET",
        "/apis",
        headers={
            "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        },
    )
    assert headers["Content-Type"].endswith("as=APIGroupDiscoveryList")
    assert agg["kind"] == "APIGroupDiscoveryList"
    _, _, version = raw(sim, "GET", "/version", token=False)
    assert version["major"] == "1"


@pytest.mark.parametrize("token", [False, "not-the-token"])
def test_missing_or_wrong_token_is_401(sim: Simulation, token: str | Literal[False]) -> None:
    status, _, body = raw(sim, "GET", "/api/v1/nodes", token=token)
    assert status == 401
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401


def test_each_cluster_has_its_own_ca_and_token(sim: Simulation) -> None:
    assert sim.token("sim-000") != sim.token("sim-001")
    assert sim.ca_path("sim-000").read_bytes() != sim.ca_path("sim-001").read_bytes()
    kubeconfig = Path(sim.kubeconfig_path("sim-001")).read_text()
    assert sim.server_url("sim-001") in kubeconfig and "current-context: sim-001" in kubeconfig
    ctx = ssl.create_default_context(cafile=str(sim.ca_path("sim-000")))
    host, port = sim.server_url("sim-001").removeprefix("https://").split(":")
    with (
        pytest.raises(ssl.SSLCertVerificationError),
        socket.create_connection((host, int(port))) as s,
        ctx.wrap_socket(s, server_hostname=host),
    ):
        pass


# ------------------------------------------------------------------------------------------ lists


def test_typed_list_node(core: client.CoreV1Api) -> None:
    nodes = core.list_node()
    assert len(nodes.items) == NODES
    assert int(list_rv(nodes)) > 0
    node = nodes.items[0]
    assert labels_of(node)["nvidia.com/gpu.count"] == "8"
    allocatable = present(present(node.status, "node status").allocatable, "allocatable")
    assert allocatable["nvidia.com/gpu"] == "8"
    names = [name_of(n) for n in nodes.items]
    assert names == sorted(names)


def test_pagination_with_limit_and_continue(core: client.CoreV1Api) -> None:
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_node(limit=7, _continue=token)
        pages += 1
        seen += [name_of(n) for n in page.items]
        page_meta = present(page.metadata, "list metadata")
        token = page_meta._continue
        if not token:
            break
        assert page_meta.remaining_item_count == NODES - len(seen)
    assert pages == -(-NODES // 7)
    assert len(seen) == len(set(seen)) == NODES
    assert seen == [name_of(n) for n in core.list_node().items]


def test_list_namespaced_pod_with_label_and_field_selectors(core: client.CoreV1Api) -> None:
    nodes = [name_of(n) for n in core.list_node(limit=2).items]
    specs = [
        ("sel-a", {"app": "a", "tier": "x"}, nodes[0]),
        ("sel-b", {"app": "a", "tier": "y"}, nodes[1]),
        ("sel-c", {"app": "b"}, nodes[0]),
        ("sel-d", {"app": "a", "tier": "z", "canary": "1"}, None),
    ]
    for name, labels, node in specs:
        core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest(name, labels, node)))

    def names(**kw: Any) -> set[str]:
        return {name_of(p) for p in core.list_namespaced_pod(NS, **kw).items if name_of(p).startswith("sel-")}

    assert names(label_selector="app=a") == {"sel-a", "sel-b", "sel-d"}
    assert names(label_selector="app==a,tier in (x, y)") == {"sel-a", "sel-b"}
    assert names(label_selector="app=a,tier notin (x)") == {"sel-b", "sel-d"}
    assert names(label_selector="app!=a") == {"sel-c"}
    assert names(label_selector="canary") == {"sel-d"}
    assert names(label_selector="app,!canary") == {"sel-a", "sel-b", "sel-c"}
    assert names(field_selector=f"spec.nodeName={nodes[0]}") == {"sel-a", "sel-c"}
    assert names(field_selector=f"spec.nodeName={nodes[0]},status.phase!=Failed,metadata.name!=sel-c") == {
        "sel-a"
    }
    assert names(field_selector="spec.nodeName=", label_selector="app=a") == {"sel-d"}
    assert names(field_selector="status.phase=Pending") == {"sel-a", "sel-b", "sel-c", "sel-d"}
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod(NS, field_selector="spec.unknownField=x")
    assert err.value.status == 400
    for name, _, _ in specs:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


# ------------------------------------------------------------------------------------------ writes


def test_job_create_get_patch_delete(batch: client.BatchV1Api) -> None:
    created = batch.create_namespaced_job(NS, sent_as(client.V1Job, job_manifest("train-1", suspend=True)))
    assert meta(created).uid and rv_of(created)
    spec = present(created.spec, "job spec")
    match_labels = present(present(spec.selector, "selector").match_labels, "matchLabels")
    assert match_labels["batch.kubernetes.io/controller-uid"] == meta(created).uid
    pod_spec = present(spec.template.spec, "pod template spec")
    resources = present(pod_spec.containers[0].resources, "container resources")
    assert present(resources.requests, "requests")["nvidia.com/gpu"] == "1"
    got = batch.read_namespaced_job("train-1", NS)
    assert labels_of(got)["gpufed.io/job-id"] == "train-1"

    patched = batch.patch_namespaced_job("train-1", NS, {"metadata": {"labels": {"gpufed.io/attempt": "2"}}})
    assert labels_of(patched) == {"gpufed.io/job-id": "train-1", "gpufed.io/attempt": "2"}
    assert int(rv_of(patched)) > int(rv_of(created))
    merged = batch.patch_namespaced_job(
        "train-1", NS, {"spec": {"suspend": False}}, _content_type="application/merge-patch+json"
    )
    assert present(merged.spec, "job spec").suspend is False and meta(merged).generation == 2
    jp = batch.patch_namespaced_job(
        "train-1", NS, [{"op": "add", "path": "/metadata/annotations", "value": {"note": "hi"}}]
    )
    assert meta(jp).annotations == {"note": "hi"}

    status = as_dict(batch.delete_namespaced_job("train-1", NS, propagation_policy="Background"))
    assert status["status"] == "Success"  # v37 returns deletes as plain objects
    with pytest.raises(ApiException) as err:
        batch.read_namespaced_job("train-1", NS)
    assert err.value.status == 404


def test_status_subresource_and_main_resource_keep_apart(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, sent_as(client.V1Job, job_manifest("status-1")))
    st = batch.patch_namespaced_job_status(
        "status-1", NS, {"status": {"active": 1}, "metadata": {"labels": {"x": "y"}}}
    )
    assert present(st.status, "job status").active == 1
    assert "x" not in labels_of(st)  # a status write changes only status
    main = batch.patch_namespaced_job(
        "status-1", NS, {"status": {"active": 5}, "metadata": {"labels": {"x": "z"}}}
    )
    assert (
        present(main.status, "job status").active == 1 and labels_of(main)["x"] == "z"
    )  # a main write keeps the stored status
    job = batch.read_namespaced_job("status-1", NS)
    present(job.status, "job status").succeeded = 1
    replaced = batch.replace_namespaced_job_status("status-1", NS, job)
    assert present(replaced.status, "job status").succeeded == 1
    batch.delete_namespaced_job("status-1", NS, propagation_policy="Background")


def test_error_statuses_map_to_api_exceptions(batch: client.BatchV1Api, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        batch.read_namespaced_job("nope", NS)
    body = error_body(err)
    assert err.value.status == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'jobs.batch "nope" not found'
    assert body["details"] == {"name": "nope", "group": "batch", "kind": "jobs"}

    batch.create_namespaced_job(NS, sent_as(client.V1Job, job_manifest("dup")))
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(NS, sent_as(client.V1Job, job_manifest("dup")))
    assert err.value.status == 409 and error_body(err)["reason"] == "AlreadyExists"

    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(NS, sent_as(client.V1Job, job_manifest("Bad_Name")))
    body = error_body(err)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert [c["field"] for c in body["details"]["causes"]] == ["metadata.name"]

    no_containers = job_manifest("empty")
    no_containers["spec"]["template"]["spec"]["containers"] = []
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(NS, sent_as(client.V1Job, no_containers))
    body = error_body(err)
    assert err.value.status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.template.spec.containers"]
    assert body["details"]["causes"][0]["reason"] == "FieldValueRequired"

    with pytest.raises(ApiException) as err:
        core.create_namespace(sent_as(client.V1Namespace, {"metadata": {"name": "not.a.label"}}))
    assert err.value.status == 422

    job = batch.read_namespaced_job("dup", NS)
    pod_spec = present(present(job.spec, "job spec").template.spec, "pod template spec")
    pod_spec.containers[0].image = "busybox:2"
    with pytest.raises(ApiException) as err:
        batch.replace_namespaced_job("dup", NS, job)
    body = error_body(err)
    assert err.value.status == 422 and "spec.template" in [c["field"] for c in body["details"]["causes"]]
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job("dup", NS, {"spec": {"completions": 3}})
    assert err.value.status == 422

    stale = batch.read_namespaced_job("dup", NS)
    batch.patch_namespaced_job("dup", NS, {"metadata": {"labels": {"bump": "1"}}})
    labels_of(stale)["late"] = "1"
    with pytest.raises(ApiException) as err:
        batch.replace_namespaced_job("dup", NS, stale)
    assert err.value.status == 409 and error_body(err)["reason"] == "Conflict"

    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job("no-such-namespace", sent_as(client.V1Job, job_manifest("x")))
    assert err.value.status == 404
    batch.delete_namespaced_job("dup", NS, propagation_policy="Background")


def test_delete_semantics_grace_finalizers_and_orphans(
    sim: Simulation, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    node = name_of(core.list_node(limit=1).items[0])
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest("del-bound", {"del": "1"}, node)))
    sim.call(
        lambda: sim.store("sim-000").mutate(
            "pods", NS, "del-bound", lambda p: p["status"].update(phase="Running")
        )
    )
    terminating = core.delete_namespaced_pod("del-bound", NS)  # a running pod waits for its kubelet
    assert meta(terminating).deletion_timestamp and meta(terminating).deletion_grace_period_seconds == 30
    assert meta(core.read_namespaced_pod("del-bound", NS)).deletion_timestamp is not None
    core.delete_namespaced_pod("del-bound", NS, grace_period_seconds=0)  # force
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest("del-pending", {"del": "1"})))
    core.delete_namespaced_pod("del-pending", NS)  # never scheduled: gone at once
    assert not core.list_namespaced_pod(NS, label_selector="del=1").items

    job = batch.create_namespaced_job(NS, sent_as(client.V1Job, job_manifest("owner")))
    owned = pod_manifest("owned-pod", {"del": "2"})
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "owner",
            "uid": meta(job).uid,
            "controller": True,
        }
    ]
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, owned))
    status, headers, body = raw(sim, "DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/owner")
    assert status == 200 and body["status"] == "Success" and "child pods are preserved" in headers["Warning"]
    assert meta(core.read_namespaced_pod("owned-pod", NS)).owner_references is None  # orphaned

    keep = {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    core.create_namespace(sent_as(client.V1Namespace, keep))
    marked = as_dict(core.delete_namespace("held"))
    assert marked["metadata"]["deletionTimestamp"]
    core.patch_namespace(
        "held", {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    with pytest.raises(ApiException) as err:
        core.read_namespace("held")
    assert err.value.status == 404

    for i in range(3):
        core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest(f"coll-{i}", {"coll": "yes"})))
    status, _, gone = raw(sim, "DELETE", f"/api/v1/namespaces/{NS}/pods?labelSelector=coll%3Dyes")
    assert status == 200 and gone["kind"] == "PodList"  # the real server answers with what it deleted
    assert sorted(p["metadata"]["name"] for p in gone["items"]) == ["coll-0", "coll-1", "coll-2"]
    assert not core.list_namespaced_pod(NS, label_selector="coll=yes").items
    core.delete_namespaced_pod("owned-pod", NS)


def test_pod_binding_assigns_a_node_once(sim: Simulation, core: client.CoreV1Api) -> None:
    node = name_of(core.list_node(limit=1).items[0])
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest("to-bind", {})))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "to-bind"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    path = f"/api/v1/namespaces/{NS}/pods/to-bind/binding"
    assert raw(sim, "POST", path, binding)[0] == 201
    pod = core.read_namespaced_pod("to-bind", NS)
    assert present(pod.spec, "pod spec").node_name == node
    conditions = present(present(pod.status, "pod status").conditions, "conditions")
    assert [(c.type, c.status) for c in conditions] == [("PodScheduled", "True")]
    status, _, body = raw(sim, "POST", path, binding)
    assert status == 409 and body["reason"] == "Conflict"
    core.delete_namespaced_pod("to-bind", NS, grace_period_seconds=0)


# ------------------------------------------------------------------------------------------ Kueue versions


def test_kueue_served_at_v1beta2_and_v1beta1_with_renamed_fields(
    sim: Simulation, custom: client.CustomObjectsApi
) -> None:
    g = "kueue.x-k8s.io"
    cq = {
        "apiVersion": f"{g}/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq-conv"},
        "spec": {
            "cohort": "research",
            "admissionChecks": ["multikueue"],
            "namespaceSelector": {},
            "resourceGroups": [],
        },
    }
    created = as_dict(custom.create_cluster_custom_object(g, "v1beta1", "clusterqueues", cq))
    assert created["apiVersion"] == f"{g}/v1beta1" and created["spec"]["cohort"] == "research"
    stored = sim.call(lambda: sim.store("sim-000").get("clusterqueues.kueue.x-k8s.io", "", "cq-conv"))
    assert stored["apiVersion"] == f"{g}/v1beta2"
    assert stored["spec"]["cohortName"] == "research" and "cohort" not in stored["spec"]
    assert stored["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}
    v2 = as_dict(custom.get_cluster_custom_object(g, "v1beta2", "clusterqueues", "cq-conv"))
    assert v2["spec"]["cohortName"] == "research"
    patched = as_dict(
        custom.patch_cluster_custom_object(
            g, "v1beta1", "clusterqueues", "cq-conv", {"spec": {"cohort": "prod"}}
        )
    )
    assert patched["spec"]["cohort"] == "prod"
    v2 = as_dict(custom.get_cluster_custom_object(g, "v1beta2", "clusterqueues", "cq-conv"))
    assert v2["spec"]["cohortName"] == "prod"

    lq = {
        "apiVersion": f"{g}/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq-conv", "namespace": NS},
        "spec": {"clusterQueue": "cq-conv"},
    }
    custom.create_namespaced_custom_object(g, "v1beta2", NS, "localqueues", lq)
    usage = [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "8"}]}]
    custom.patch_namespaced_custom_object_status(
        g, "v1beta2", NS, "localqueues", "lq-conv", {"status": {"flavorsUsage": usage}}
    )
    old = as_dict(custom.get_namespaced_custom_object(g, "v1beta1", NS, "localqueues", "lq-conv"))
    assert old["status"]["flavorUsage"] == usage and "flavorsUsage" not in old["status"]
    listed = as_dict(custom.list_namespaced_custom_object(g, "v1beta1", NS, "localqueues"))
    assert listed["apiVersion"] == f"{g}/v1beta1" and listed["items"][0]["status"]["flavorUsage"] == usage
    status, _, _ = raw(
        sim,
        "PATCH",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq-conv",
        {"spec": {}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert status == 415  # custom resources take no strategic merge patch
    custom.delete_cluster_custom_object(g, "v1beta2", "clusterqueues", "cq-conv")


# ------------------------------------------------------------------------------------------ watch


def mutate_node(sim: Simulation, name: str, key: str, value: str) -> None:
    sim.call(lambda: mutate_node_on(sim, "sim-000", name, key, value))


def mutate_node_on(sim: Simulation, cluster: str, name: str, key: str, value: str) -> None:
    """Set a label on a node (on the simulation loop)."""

    def fn(node: dict[str, Any]) -> None:
        node["metadata"].setdefault("labels", {})[key] = value

    sim.store(cluster).mutate("nodes", "", name, fn)


def when_watching(sim: Simulation, fn: Any, cluster: str = "sim-000") -> threading.Thread:
    """Run `fn` on a thread once `cluster` holds a watch (polled, with a deadline generous for a loaded
    host), so that the change lands while the test's stream is live. The streams start from a
    resourceVersion read before, so a change made before the stream opens (a watch of an earlier test
    not yet dropped) reaches it all the same."""
    api = sim.api(cluster)

    def run() -> None:
        wait_for(lambda: api.watch_count > 0, timeout=60, interval=0.01, what=f"a watch open on {cluster}")
        fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_watch_nodes_gets_added_and_modified_events(sim: Simulation, core: client.CoreV1Api) -> None:
    nodes = core.list_node()
    rv = list_rv(nodes)
    first = name_of(nodes.items[0])
    new_node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "late-node", "labels": {"pool": "x"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }

    def act() -> None:
        mutate_node(sim, first, "touched", "yes")
        core.create_node(sent_as(client.V1Node, new_node))

    t = when_watching(sim, act)
    events = []
    w = watch.Watch()
    for ev in w.stream(core.list_node, resource_version=rv, timeout_seconds=10, _request_timeout=15):
        events.append((ev["type"], ev["object"].metadata.name))
        if len(events) == 2:
            w.stop()
    t.join()
    assert events == [("MODIFIED", first), ("ADDED", "late-node")]
    assert isinstance(ev["object"], client.V1Node)
    allocatable = present(present(ev["object"].status, "node status").allocatable, "allocatable")
    assert allocatable["nvidia.com/gpu"] == "8"
    core.delete_node("late-node")


def test_watch_from_zero_sends_current_state_then_events(core: client.CoreV1Api) -> None:
    w = watch.Watch()
    added = []
    for ev in w.stream(core.list_node, timeout_seconds=5, _request_timeout=10):
        added.append(ev["type"])
        if len(added) == NODES:
            w.stop()
    assert added == ["ADDED"] * NODES


def test_watch_bookmarks_carry_the_current_resource_version(sim: Simulation, core: client.CoreV1Api) -> None:
    rv = list_rv(core.list_node())
    w = watch.Watch()
    seen = None
    for ev in w.stream(
        core.list_node,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _request_timeout=10,
    ):
        if ev["type"] == "BOOKMARK":
            seen = ev["raw_object"]
            w.stop()
    assert seen is not None and seen["kind"] == "Node"
    assert int(seen["metadata"]["resourceVersion"]) >= int(rv)
    assert w.resource_version == seen["metadata"]["resourceVersion"]


def test_watch_timeout_seconds_ends_the_stream_cleanly(sim: Simulation, core: client.CoreV1Api) -> None:
    """The server keeps the stream open, delivering events, until timeout_seconds, then ends it itself:
    the client's read timeout (far longer) never fires, and the server holds no watch after."""
    nodes = core.list_node()
    rv, first = list_rv(nodes), name_of(nodes.items[0])
    api = sim.api("sim-000")
    t = when_watching(sim, lambda: mutate_node(sim, first, "timeout-test", "seen"))
    events = list(
        watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=3, _request_timeout=120)
    )  # a ReadTimeoutError here would say the server never ended the stream
    t.join()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("MODIFIED", first)]
    wait_for(lambda: api.watch_count == 0, timeout=60, what="the server to drop the ended watch")


def test_watch_410_expired_then_relist_recovers(sim: Simulation, core: client.CoreV1Api) -> None:
    first = name_of(core.list_node().items[1])
    old_rv = list_rv(core.list_node())
    for i in range(3):
        mutate_node(sim, first, "round", str(i))
    sim.call(lambda: sim.store("sim-000").compact("nodes"))
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_node, resource_version=old_rv, timeout_seconds=5, _request_timeout=10
        ):
            pass
    assert err.value.status == 410
    assert "Expired" in err.value.reason
    relisted = core.list_node()  # recover: relist, then watch from the list's resourceVersion
    assert labels_of(relisted.items[1])["round"] == "2"
    t = when_watching(sim, lambda: mutate_node(sim, first, "round", "3"))
    w = watch.Watch()
    for ev in w.stream(
        core.list_node,
        resource_version=list_rv(relisted),
        timeout_seconds=10,
        _request_timeout=15,
    ):
        assert ev["type"] == "MODIFIED" and ev["object"].metadata.labels["round"] == "3"
        w.stop()
    t.join()


def test_watch_with_label_selector_sees_objects_enter_and_leave(
    sim: Simulation, core: client.CoreV1Api
) -> None:
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest("w-pod", {"app": "other"})))
    rv = list_rv(core.list_namespaced_pod(NS))

    def act() -> None:
        core.patch_namespaced_pod("w-pod", NS, {"metadata": {"labels": {"app": "watched"}}})
        core.patch_namespaced_pod("w-pod", NS, {"metadata": {"labels": {"extra": "1"}}})
        core.patch_namespaced_pod("w-pod", NS, {"metadata": {"labels": {"app": "gone"}}})

    t = when_watching(sim, act)
    events = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod,
        NS,
        label_selector="app=watched",
        resource_version=rv,
        timeout_seconds=10,
        _request_timeout=15,
    ):
        events.append(ev["type"])
        if len(events) == 3:
            w.stop()
    t.join()
    assert events == ["ADDED", "MODIFIED", "DELETED"]
    core.delete_namespaced_pod("w-pod", NS)


def test_watch_from_list_rv_reports_an_object_that_left_the_selector_before_the_watch_opened(
    core: client.CoreV1Api,
) -> None:
    """A reflector lists with a selector, then watches from the list's resourceVersion: an object that
    stopped matching in between must come as DELETED (with its last matching state, as the real watch
    cache sends it), or the client keeps it for ever."""
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest("gap-pod", {"app": "gap"})))
    listed = core.list_namespaced_pod(NS, label_selector="app=gap")
    assert [name_of(p) for p in listed.items] == ["gap-pod"]
    core.patch_namespaced_pod("gap-pod", NS, {"metadata": {"labels": {"app": "elsewhere"}}})
    w = watch.Watch()
    events = []
    for ev in w.stream(
        core.list_namespaced_pod,
        NS,
        label_selector="app=gap",
        resource_version=list_rv(listed),
        timeout_seconds=2,
        _request_timeout=10,
    ):
        events.append(ev)
        w.stop()
    assert [e["type"] for e in events] == ["DELETED"]
    gone = events[0]["object"]
    assert gone.metadata.labels["app"] == "gap"  # the state the watcher knew, not one it cannot match
    assert int(gone.metadata.resource_version) > int(list_rv(listed))
    core.delete_namespaced_pod("gap-pod", NS)


def test_updating_a_terminating_pod_does_not_delete_it_before_its_grace_period(
    sim: Simulation, core: client.CoreV1Api
) -> None:
    """Only an object with no finalizers AND a zero grace period is deleted by an update; a running pod
    inside its grace period stays (the kubelet removes it), however often it is patched."""
    node = name_of(core.list_node(limit=1).items[0])
    core.create_namespaced_pod(NS, sent_as(client.V1Pod, pod_manifest("grace-pod", {"grace": "1"}, node)))
    sim.call(
        lambda: sim.store("sim-000").mutate(
            "pods", NS, "grace-pod", lambda p: p["status"].update(phase="Running")
        )
    )
    core.delete_namespaced_pod("grace-pod", NS)
    core.patch_namespaced_pod("grace-pod", NS, {"metadata": {"labels": {"seen": "yes"}}})
    core.patch_namespaced_pod_status("grace-pod", NS, {"status": {"message": "stopping"}})
    pod = core.read_namespaced_pod("grace-pod", NS)
    assert meta(pod).deletion_timestamp is not None and labels_of(pod)["seen"] == "yes"
    core.delete_namespaced_pod("grace-pod", NS, grace_period_seconds=0)


def test_a_status_write_keeps_an_object_held_by_its_finalizers(
    sim: Simulation, batch: client.BatchV1Api
) -> None:
    """A PUT to /status ignores the metadata it carries, so it cannot drop finalizers and delete the object."""
    job = job_manifest("held-job", suspend=True)
    job["metadata"]["finalizers"] = ["example.com/hold"]
    batch.create_namespaced_job(NS, sent_as(client.V1Job, job))
    batch.delete_namespaced_job("held-job", NS, propagation_policy="Background")
    current = batch.read_namespaced_job("held-job", NS).to_dict()
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "held-job"},
        "status": {"active": 0},
    }
    body["metadata"]["resourceVersion"] = current["metadata"]["resource_version"]
    status, _, _ = raw(sim, "PUT", f"/apis/batch/v1/namespaces/{NS}/jobs/held-job/status", body)
    assert status == 200
    kept = batch.read_namespaced_job("held-job", NS)
    assert meta(kept).deletion_timestamp is not None and meta(kept).finalizers == ["example.com/hold"]
    batch.patch_namespaced_job(
        "held-job", NS, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )


# ------------------------------------------------------------------------------------------ faults


def test_fault_down_refuses_connections_until_cleared(sim: Simulation) -> None:
    host, port = sim.server_url("sim-001").removeprefix("https://").split(":")
    sim.faults("sim-001").down()
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=2).close()
        with (
            api_client(sim, "sim-001", retries=False) as c,
            pytest.raises(urllib3.exceptions.HTTPError) as err,
        ):
            client.CoreV1Api(c).list_node(_request_timeout=2)
        assert "refused" in str(err.value).lower()
    finally:
        sim.faults("sim-001").clear()
    with api_client(sim, "sim-001") as c:
        assert len(client.CoreV1Api(c).list_node().items) == NODES


def test_fault_expired_token_is_401_for_every_request(sim: Simulation) -> None:
    sim.faults("sim-001").expire_token()
    try:
        with api_client(sim, "sim-001") as c, pytest.raises(ApiException) as err:
            client.CoreV1Api(c).list_node()
        assert err.value.status == 401 and error_body(err)["reason"] == "Unauthorized"
    finally:
        sim.faults("sim-001").clear()


def test_fault_error_rate_answers_5xx_and_429_with_retry_after(sim: Simulation) -> None:
    faults = sim.faults("sim-001")
    faults.error_rate(1.0, codes=[429], retry_after=3)
    try:
        status, headers, body = raw(sim, "GET", "/api/v1/nodes", name="sim-001")
        assert status == 429 and headers["Retry-After"] == "3" and body["reason"] == "TooManyRequests"
        faults.error_rate(1.0, codes=[500, 503])
        codes = {raw(sim, "GET", "/api/v1/nodes", name="sim-001")[0] for _ in range(20)}
        assert codes == {500, 503}
        faults.error_rate(0.5)
        results = [raw(sim, "GET", "/api/v1/namespaces", name="sim-001")[0] for _ in range(200)]
        assert 40 < results.count(200) < 160 and set(results) <= {200, 500, 503, 429}
    finally:
        faults.clear()
    assert raw(sim, "GET", "/api/v1/nodes", name="sim-001")[0] == 200


def test_fault_cut_watches_ends_open_streams(sim: Simulation) -> None:
    """The stream asks for an hour; only the cut can end it within the wait's deadline."""
    with api_client(sim, "sim-001") as c:
        core = client.CoreV1Api(c)
        rv = list_rv(core.list_node())
        result: list[Any] = []

        def stream() -> None:  # timeout_seconds disables the client's own re-watch: the end ends the loop
            result.append(
                list(
                    watch.Watch().stream(
                        core.list_node, resource_version=rv, timeout_seconds=3600, _request_timeout=3600
                    )
                )
            )

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()

        def cut_once_open() -> bool:  # the stream may not be open yet: cut each time a watch is there
            if sim.api("sim-001").watch_count:
                sim.faults("sim-001").cut_watches()
            return not reader.is_alive()

        wait_for(cut_once_open, timeout=60, interval=0.05, what="the cut stream to end")
        assert result == [[]]


def test_a_watcher_that_stops_reading_is_cut_and_its_connection_dropped(
    sim: Simulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that opens a watch and never reads must not hold a stream, a coroutine and megabytes of
    buffered events for ever: past the queue limit its watch ends and the connection is dropped."""
    monkeypatch.setattr("kubesim.api.WATCH_QUEUE_LIMIT", 100)
    name = "sim-001"
    api_obj = sim.api(name)
    assert api_obj.watch_count == 0
    node = sim.call(lambda: sim.store(name).list("nodes")[0][0]["metadata"]["name"])
    ctx = ssl.create_default_context(cafile=str(sim.ca_path(name)))
    host, port = sim.server_url(name).removeprefix("https://").rsplit(":", 1)
    raw_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw_sock.connect((host, int(port)))
    stalled = ctx.wrap_socket(raw_sock, server_hostname=host)
    try:
        stalled.sendall(
            f"GET /api/v1/nodes?watch=true&resourceVersion={sim.store(name).resource_version} HTTP/1.1\r\n"
            f"Host: {host}\r\nAuthorization: Bearer {sim.token(name)}\r\n\r\n".encode()
        )
        deadline = time.monotonic() + 10
        while api_obj.watch_count != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert api_obj.watch_count == 1

        async def churn() -> None:
            for i in range(300):  # ~15 MB of events, far beyond what the socket buffers take
                mutate_node_on(sim, name, node, "blob", f"{i}" + "x" * 50_000)
                await asyncio.sleep(0)  # let the watch write (and block on the full socket)

        sim.call(churn)
        deadline = time.monotonic() + 30
        while api_obj.watch_count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert api_obj.watch_count == 0
    finally:
        stalled.close()


def test_fault_hang_and_latency(sim: Simulation) -> None:
    faults = sim.faults("sim-001")
    faults.latency(0.4)
    try:  # no answer within a read timeout shorter than the latency; an answer within a longer one
        with (
            api_client(sim, "sim-001", retries=False) as c,
            pytest.raises(urllib3.exceptions.ReadTimeoutError),
        ):
            client.CoreV1Api(c).list_namespace(_request_timeout=(30, 0.05))
        assert raw(sim, "GET", "/api/v1/namespaces", name="sim-001")[0] == 200
    finally:
        faults.clear()
    faults.hang()
    try:  # the hung server never answers: the client's read timeout is what ends the request
        with (
            api_client(sim, "sim-001", retries=False) as c,
            pytest.raises(urllib3.exceptions.ReadTimeoutError),
        ):
            client.CoreV1Api(c).list_node(_request_timeout=1)
    finally:
        faults.clear()
    assert raw(sim, "GET", "/api/v1/namespaces", name="sim-001")[0] == 200


def test_fault_forbidden_is_403(sim: Simulation) -> None:
    sim.faults("sim-001").forbid()
    try:
        status, _, body = raw(sim, "GET", "/api/v1/nodes", name="sim-001")
        assert status == 403 and body["reason"] == "Forbidden"
    finally:
        sim.faults("sim-001").clear()


def admin(sim: Simulation, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        sim.admin_url + path, method=method, data=json.dumps(body).encode() if body is not None else None
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_admin_endpoint_sets_faults_and_the_clock(sim: Simulation) -> None:
    status, body = admin(sim, "GET", "/clusters")
    assert status == 200 and [c["name"] for c in body["clusters"]] == ["sim-000", "sim-001"]
    status, state = admin(sim, "POST", "/clusters/sim-001/faults", {"expired_token": True, "latency": 0.1})
    assert status == 200 and state["expired_token"] is True and state["latency"] == 0.1
    assert raw(sim, "GET", "/api/v1/nodes", name="sim-001")[0] == 401
    status, state = admin(sim, "DELETE", "/clusters/sim-001/faults")
    assert status == 200 and state["expired_token"] is False
    assert raw(sim, "GET", "/api/v1/nodes", name="sim-001")[0] == 200
    assert admin(sim, "POST", "/clusters/sim-001/faults", {"bogus": 1})[0] == 400
    assert admin(sim, "POST", "/clusters/nope/faults", {"down": True})[0] == 404
    before = admin(sim, "GET", "/clock")[1]["now"]
    status, clock = admin(sim, "POST", "/clock", {"advance": 3600})
    assert status == 200 and clock["now"] - before >= 3600
    status, _ = admin(sim, "POST", "/clusters/sim-001/compact", {"resource": "nodes"})
    assert status == 200


def test_stop_leaves_no_thread_or_socket(tmp_path: Path) -> None:
    before = {t.ident for t in threading.enumerate()}
    sim = Simulation(synthetic_fleet(1, 3), tmp_path, controllers=False)
    sim.start()
    url, admin_url = sim.server_url("sim-000"), sim.admin_url
    with api_client(sim) as c:
        core = client.CoreV1Api(c)
        rv = list_rv(core.list_node())
        result: list[Any] = []

        def watch_forever() -> None:
            try:
                result.extend(
                    watch.Watch().stream(
                        core.list_node, resource_version=rv, timeout_seconds=60, _request_timeout=70
                    )
                )
            except Exception as e:  # the stream breaks when the server goes away
                result.append(e)

        t = threading.Thread(target=watch_forever)
        t.start()
        wait_for(lambda: sim.api("sim-000").watch_count == 1, timeout=60, what="the watch open")
        sim.stop()
        t.join(10)
        assert not t.is_alive()
    assert {t.ident for t in threading.enumerate()} == before
    for u in (url, admin_url):
        host, port = u.split("://")[1].split(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=2).close()
