"""Table tests for kubesim's round-two pieces that need no server: field ownership and apply
(kubesim.apply), protobuf bodies (kubesim.protobuf), the simulated container log (kubesim.podlogs), RBAC
request attributes and rules (kubesim.rbac), PDB arithmetic (kubesim.disruption) and list snapshots
(ObjectStore.list_at)."""

from __future__ import annotations

from typing import Any

import pytest

from kubesim import apply as ssa
from kubesim import disruption, podlogs, protobuf, rbac
from kubesim.store import GoneError, ObjectStore, WatchEvent, rfc3339


def pod(labels: dict[str, str] | None = None, image: str = "busybox") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": labels or {"app": "a"}},
        "spec": {"containers": [{"name": "main", "image": image}]},
    }


# ------------------------------------------------------------------------------------------ apply


def test_field_paths_round_trip_through_fields_v1() -> None:
    fields = set(ssa.leaves(pod()))
    assert ("f:metadata", "f:labels", "f:app") in fields
    assert ("f:spec", "f:containers", 'k:{"name":"main"}', ".") in fields
    assert ("f:spec", "f:containers", 'k:{"name":"main"}', "f:image") in fields
    assert ssa.from_fields_v1(ssa.to_fields_v1(fields)) == fields
    assert ssa.path_string(("f:spec", "f:containers", 'k:{"name":"main"}', "f:image")) == (
        '.spec.containers[name="main"].image'
    )
    assert ssa.path_string(("f:metadata", "f:finalizers", 'v:"x"')) == '.metadata.finalizers[="x"]'


def test_apply_merges_keyed_lists_and_keeps_defaults() -> None:
    live = ssa.apply(None, pod(), "kubectl", "v1", "t0", force=False)
    live["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"  # a server default
    again = ssa.apply(live, pod(), "kubectl", "v1", "t1", force=False)
    assert again == live  # a no-op


@pytest.mark.parametrize(
    ("second", "force", "expect"),
    [
        ({"app": "a"}, False, {"app": "a"}),  # same value: shared, no conflict
        ({"app": "b"}, True, {"app": "b"}),
    ],
)
def test_apply_conflicts_only_on_a_different_value(
    second: dict[str, str], force: bool, expect: dict[str, str]
) -> None:
    live = ssa.apply(None, pod(), "one", "v1", "t0", force=False)
    out = ssa.apply(live, pod(second), "two", "v1", "t1", force=force)
    assert out["metadata"]["labels"] == expect


def test_apply_conflict_message_and_removal_of_dropped_fields() -> None:
    live = ssa.apply(None, pod({"app": "a", "tier": "x"}), "one", "v1", "t0", force=False)
    with pytest.raises(ssa.ApplyConflict) as err:
        ssa.apply(live, pod({"app": "b"}), "two", "v1", "t1", force=False)
    assert str(err.value) == 'Apply failed with 1 conflict: conflict with "one": .metadata.labels.app'
    dropped = ssa.apply(live, pod({"app": "a"}), "one", "v1", "t1", force=False)
    assert dropped["metadata"]["labels"] == {"app": "a"}


def test_update_takes_ownership_of_what_it_changed() -> None:
    old = ssa.apply(None, pod(), "kubectl", "v1", "t0", force=False)
    new = {**old, "metadata": {**old["metadata"], "labels": {"app": "z"}}}
    ssa.record_update(old, new, "kubectl-label", "v1", "t1")
    owners = {e.manager: e.fields for e in ssa.read_entries(new)}
    assert ("f:metadata", "f:labels", "f:app") in owners["kubectl-label"]
    assert ("f:metadata", "f:labels", "f:app") not in owners["kubectl"]
    with pytest.raises(ssa.ApplyConflict) as err:
        ssa.apply(new, pod(), "kubectl", "v1", "t2", force=False)
    assert 'conflict with "kubectl-label" using v1 at t1: .metadata.labels.app' in str(err.value)


# ------------------------------------------------------------------------------------------ protobuf


def _field(num: int, payload: bytes) -> bytes:
    return bytes([num << 3 | 2, len(payload)]) + payload


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, raw)


def test_protobuf_delete_options_and_eviction() -> None:
    opts = bytes([1 << 3, 0]) + _field(4, b"Background")  # gracePeriodSeconds=0, propagationPolicy
    assert protobuf.decode(_envelope("v1", "DeleteOptions", opts)) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Background",
    }
    meta = _field(1, b"web-0") + _field(3, b"default")
    ev = protobuf.decode(_envelope("policy/v1", "Eviction", _field(1, meta) + _field(2, opts)))
    assert ev["metadata"] == {"name": "web-0", "namespace": "default"}
    assert ev["deleteOptions"]["gracePeriodSeconds"] == 0


def test_protobuf_unknown_kind_and_garbage() -> None:
    with pytest.raises(protobuf.UnsupportedKind):
        protobuf.decode(_envelope("batch/v1", "Job", b""))
    with pytest.raises(protobuf.ProtobufError):
        protobuf.decode(b"{}")


# ------------------------------------------------------------------------------------------ logs


def running_pod(started: str, finished: str | None = None, code: int = 0) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": started}}
    if finished:
        reason = "Completed" if code == 0 else "Error"
        state = {
            "terminated": {"startedAt": started, "finishedAt": finished, "exitCode": code, "reason": reason}
        }
    p = pod()
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"containerStatuses": [{"name": "main", "state": state}]}
    return p


def test_log_lines_grow_and_end_with_the_exit() -> None:
    start = 1_700_000_000.0
    running, done = podlogs.lines(running_pod("2023-11-14T22:13:20Z"), "main", start + 25)
    assert not done and [t - start for t, _ in running] == [0, 10, 20]
    final, done = podlogs.lines(
        running_pod("2023-11-14T22:13:20Z", "2023-11-14T22:13:55Z", 3), "main", start + 99
    )
    assert done and final[: len(running)] == running
    assert final[-1][1] == 'kubesim: container "main" exited with code 3 (Error)'
    opts = podlogs.parse_options({"tailLines": "1", "timestamps": "true"})
    picked = podlogs.select(final, opts, start + 99)
    assert podlogs.render(picked, True) == (
        b'2023-11-14T22:13:55.000000000Z kubesim: container "main" exited with code 3 (Error)\n'
    )


def test_a_follow_gets_the_exit_line_though_the_kubelet_reported_it_after_later_progress() -> None:
    """The clock passed 40 s (progress lines up to 40 s sent) before the kubelet wrote the exit at 30 s:
    the finished log has fewer lines than were sent, and the follow must still end with the exit."""
    start = 1_700_000_000.0
    running, _ = podlogs.lines(running_pod("2023-11-14T22:13:20Z"), "main", start + 45)
    assert [t - start for t, _ in running] == [0, 10, 20, 30, 40]
    final, done = podlogs.lines(
        running_pod("2023-11-14T22:13:20Z", "2023-11-14T22:13:50Z"), "main", start + 46
    )
    assert done and len(final) < len(running)
    [exit_line] = podlogs.unsent(final, last_sent=running[-1][0], done=done)
    assert exit_line[1] == 'kubesim: container "main" exited with code 0 (Completed)'
    # in the ordinary case: only what came after the last line sent
    assert podlogs.unsent(running, last_sent=start + 20, done=False) == running[3:]


def test_since_seconds_and_since_time_keep_the_lines_from_then_on() -> None:
    start = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    final, _ = podlogs.lines(running_pod("2023-11-14T22:13:20Z", "2023-11-14T22:13:55Z"), "main", start + 99)
    assert [t - start for t, _ in final] == [0, 10, 20, 30, 35]
    last_half_minute = podlogs.select(final, podlogs.parse_options({"sinceSeconds": "30"}), start + 45)
    assert [t - start for t, _ in last_half_minute] == [20, 30, 35]  # from 15 s on
    from_20s = podlogs.parse_options({"sinceTime": "2023-11-14T22:13:40Z"})
    assert [t - start for t, _ in podlogs.select(final, from_20s, start + 99)] == [20, 30, 35]
    both = podlogs.parse_options({"sinceSeconds": "60", "tailLines": "1"})  # since first, then the tail
    assert [t - start for t, _ in podlogs.select(final, both, start + 45)] == [35]


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({"sinceSeconds": "0"}, 422, "sinceSeconds: Invalid value: 0: must be greater than 0"),
        ({"sinceSeconds": "soon"}, 400, 'sinceSeconds: Invalid value: "soon": must be an integer'),
        ({"sinceTime": "yesterday"}, 400, 'sinceTime: Invalid value: "yesterday": not an RFC 3339 time'),
        (
            {"sinceSeconds": "5", "sinceTime": "2023-11-14T22:13:40Z"},
            422,
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
    ],
)
def test_bad_since_options_are_refused_naming_the_field(
    params: dict[str, str | None], code: int, message: str
) -> None:
    with pytest.raises(podlogs.LogError) as refused:
        podlogs.parse_options(params)
    assert refused.value.code == code and message in refused.value.message


def test_log_errors_are_the_real_ones() -> None:
    with pytest.raises(podlogs.LogError, match='previous terminated container "main" in pod "p" not found'):
        podlogs.lines(running_pod("2023-11-14T22:13:20Z"), "main", 0, previous=True)
    waiting = pod()
    with pytest.raises(podlogs.LogError, match='container "main" in pod "p" is waiting to start'):
        podlogs.lines(waiting, "main", 0)
    with pytest.raises(podlogs.LogError, match="container nope is not valid for pod p"):
        podlogs.choose_container(waiting, "nope")


# ------------------------------------------------------------------------------------------ rbac


@pytest.mark.parametrize(
    ("method", "path", "watch", "expect"),
    [
        ("GET", "/api/v1/nodes", False, ("list", "", "nodes", "", "", "")),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", False, ("get", "", "pods", "log", "ns", "p")),
        ("GET", "/apis/batch/v1/watch/namespaces/ns/jobs", False, ("watch", "batch", "jobs", "", "ns", "")),
        ("GET", "/api/v1/pods", True, ("watch", "", "pods", "", "", "")),
        ("DELETE", "/api/v1/namespaces/ns/pods", False, ("deletecollection", "", "pods", "", "ns", "")),
        (
            "POST",
            "/api/v1/namespaces/ns/pods/p/eviction",
            False,
            ("create", "", "pods", "eviction", "ns", "p"),
        ),
        ("GET", "/api/v1/namespaces/ns", False, ("get", "", "namespaces", "", "ns", "ns")),
    ],
)
def test_request_attributes(method: str, path: str, watch: bool, expect: tuple[str, ...]) -> None:
    a = rbac.attributes_of(method, path, watch)
    assert a.resource_request
    assert (a.verb, a.group, a.resource, a.subresource, a.namespace, a.name) == expect


@pytest.mark.parametrize(
    ("rule", "allowed"),
    [
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]}, True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}, False),  # a subresource is separate
        ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}, True),
        ({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"], "resourceNames": ["other"]}, False),
    ],
)
def test_rules(rule: dict[str, Any], allowed: bool) -> None:
    attrs = rbac.attributes_of("GET", "/api/v1/namespaces/ns/pods/p/log", False)
    assert rbac.rule_allows(rule, attrs) is allowed


def test_forbidden_messages() -> None:
    who = rbac.Identity("x")
    assert rbac.forbidden_message(who, rbac.attributes_of("GET", "/api/v1/nodes", False))[0] == (
        'nodes is forbidden: User "x" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    assert rbac.forbidden_message(
        who, rbac.attributes_of("GET", "/apis/batch/v1/namespaces/d/jobs/j", False)
    )[0] == (
        'jobs.batch "j" is forbidden: User "x" cannot get resource "jobs" in API group "batch" in the namespace "d"'
    )


# ------------------------------------------------------------------------------------------ PDBs, snapshots


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({"minAvailable": 2}, 1),
        ({"maxUnavailable": 1}, 1),
        ({"minAvailable": "50%"}, 1),
        ({"maxUnavailable": "10%"}, 0),
    ],
)
def test_pdb_disruptions_allowed(spec: dict[str, Any], allowed: int) -> None:
    pods = []
    for i in range(3):
        p = pod()
        p["metadata"]["name"] = f"p{i}"
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        pods.append(p)
    pdb = {
        "metadata": {"name": "b", "generation": 1},
        "spec": {**spec, "selector": {"matchLabels": {"app": "a"}}},
    }
    status = disruption.pdb_status(pdb, pods, 0.0)
    assert status["disruptionsAllowed"] == allowed and status["currentHealthy"] == 3


def test_list_at_undoes_later_writes_and_is_gone_after_compaction() -> None:
    store = ObjectStore(lambda: 0.0)
    for name in ("a", "b", "c"):
        store.create("pods", {"metadata": {"name": name, "namespace": "d"}})
    pinned = store.resource_version
    store.delete("pods", "d", "b")
    store.create("pods", {"metadata": {"name": "z", "namespace": "d"}})
    store.mutate("pods", "d", "a", lambda o: o["metadata"].setdefault("labels", {}).update(x="1"))
    snap = {o["metadata"]["name"]: o for o in store.list_at("pods", pinned, "d")}
    assert set(snap) == {"a", "b", "c"} and "labels" not in snap["a"]["metadata"]
    store.compact("pods")
    with pytest.raises(GoneError):
        store.list_at("pods", pinned)


def test_a_status_write_leaves_the_version_before_it_as_it_was() -> None:
    """ObjectStore.set_field shares the unchanged fields with the version before: that version (as a
    watcher or list_at holds it) keeps its own status, and a later edit of the new one reaches neither."""
    store = ObjectStore(lambda: 0.0)
    events: list[WatchEvent] = []
    store.subscribe("jobs.batch", events.append)
    spec = {"template": {"metadata": {"annotations": {"a": "1"}}}}
    store.create("jobs.batch", {"metadata": {"name": "j", "namespace": "d"}, "spec": spec, "status": {}})
    first = store.get("jobs.batch", "d", "j")
    written = store.set_field("jobs.batch", "d", "j", "status", {"active": 1})
    assert written["status"] == {"active": 1} and first["status"] == {}
    assert first["metadata"]["resourceVersion"] != written["metadata"]["resourceVersion"]
    assert written["metadata"]["generation"] == first["metadata"]["generation"]  # the spec did not change
    assert events[-1].type == "MODIFIED" and events[-1].prev is first and events[-1].obj is written
    store.mutate(
        "jobs.batch", "d", "j", lambda o: o["spec"]["template"]["metadata"]["annotations"].update(a="2")
    )
    assert first["spec"]["template"]["metadata"]["annotations"] == {"a": "1"}
    assert written["spec"]["template"]["metadata"]["annotations"] == {"a": "1"}
    assert store.get("jobs.batch", "d", "j")["spec"]["template"]["metadata"]["annotations"] == {"a": "2"}


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        (0.0, "1970-01-01T00:00:00Z"),
        (1_800_000_000.999, "2027-01-15T08:00:00Z"),
        (1_800_000_001.0, "2027-01-15T08:00:01Z"),
        (1_800_000_000.5, "2027-01-15T08:00:00Z"),  # back to a second seen before the last
        (-0.5, "1969-12-31T23:59:59Z"),
    ],
)
def test_timestamps_are_the_second_the_moment_falls_in(epoch: float, text: str) -> None:
    assert rfc3339(epoch) == text
