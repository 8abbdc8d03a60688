"""The leader's hub duty (broker.ha.hub_sync, docs/hub.md) over real Redis with a fake clock: the hub is a
stand-in that holds objects and records what is written back to them, the member clusters a recording
gateway (tests/integration/test_hub_kubectl.py runs the real path with kubectl on kubesim).

A managed hub Job is submitted once as its namespace's tenant (a second HubSync, as after a restart,
finds the same job through the uid); the member's status is mirrored back on a change of the job; a
refused one is said once on the hub (an Event and a Failed condition naming the field); a delete
cancels, and so does the reconcile for an object gone while nobody watched, but never while the hub's
cache is not synced."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobState
from broker.ha.hub_sync import HubSync
from broker.tenancy.audit import AuditRecord
from broker.workload import hub_objects as hub
from tests.conftest import poll_for
from tests.service_doubles import NOW, ManualClock, RecordingGateway, idle_h100_node

pytestmark = pytest.mark.integration

JOB = hub.BATCH_JOB
NS = "team-a"


def hub_job(name: str, containers: int = 1) -> dict[str, Any]:
    """A managed batch/v1 Job as the hub's API server keeps it (uid, generation)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "uid": uuid.uuid4().hex, "generation": 1},
        "spec": {
            "managedBy": hub.MANAGED_BY,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": f"c{i}",
                            "image": "busybox:1.36",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                        for i in range(containers)
                    ],
                }
            },
        },
        "status": {},
    }


class FakeHub:
    """broker.ha.hub_sync.HubPort: objects by (resource, namespace, name); writes applied and recorded."""

    def __init__(self) -> None:
        self.objects_: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.is_synced = True
        self.writes: list[tuple[str, dict[str, str], dict[str, Any] | None]] = []
        self.events: list[tuple[str, str, str, str]] = []  # (object name, type, reason, message)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects_[(JOB.resource, NS, obj["metadata"]["name"])] = obj
        return obj

    def synced(self, kind: hub.WatchedKind) -> bool:
        return self.is_synced

    def objects(self) -> list[tuple[hub.WatchedKind, dict[str, Any]]]:
        return [(JOB, o) for o in self.objects_.values()]

    def get(self, kind: hub.WatchedKind, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects_.get((kind.resource, namespace, name))

    def write(
        self,
        kind: hub.WatchedKind,
        namespace: str,
        name: str,
        annotations: Mapping[str, str],
        status: Mapping[str, Any] | None,
    ) -> bool:
        obj = self.objects_.get((kind.resource, namespace, name))
        if obj is None:
            return False
        obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), **annotations}
        if status is not None:
            obj["status"] = copy.deepcopy(dict(status))
        self.writes.append((name, dict(annotations), None if status is None else dict(status)))
        return True

    def event(
        self, kind: hub.WatchedKind, obj: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        self.events.append((obj["metadata"]["name"], type_, reason, message))


class Members:
    """What the member objects' .status say, by workload name (None: no such object)."""

    def __init__(self) -> None:
        self.status: dict[str, dict[str, Any]] = {}

    def __call__(
        self, cluster: str, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        assert (api_version, kind) == ("batch/v1", "Job")
        return self.status.get(name)


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="hubsync" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def service_over(store: RedisStateStore) -> tuple[BrokerService, RecordingGateway]:
    gateway = RecordingGateway()
    return BrokerService(store, gateway, ManualClock(), {"gpu-east": ClusterTraits("gpu-east")}), gateway


def hub_sync(
    service: BrokerService,
    port: FakeHub,
    members: Members | None = None,
    audit: list[AuditRecord] | None = None,
) -> HubSync:
    return HubSync(
        service,
        port,
        members or Members(),
        leader=lambda: True,
        tenant_mapping={NS: "vision"},
        audit=None if audit is None else audit.append,
    )


def added(sync: HubSync, obj: dict[str, Any]) -> None:
    sync.hub_event(JOB, "ADDED", obj)
    sync.run_once()


@pytest.mark.race
def test_a_managed_hub_job_is_submitted_once_as_its_namespaces_tenant(store: RedisStateStore) -> None:
    service, _ = service_over(store)
    port = FakeHub()
    sync = hub_sync(service, port)
    obj = port.put(hub_job("train"))
    added(sync, obj)
    [record] = store.list_jobs()
    assert record.request.tenant == "vision"
    assert record.request.source == f"hub:jobs.batch/{NS}/train"
    assert record.idempotency_key == f"vision/{obj['metadata']['uid']}"
    notes = obj["metadata"]["annotations"]
    assert notes == {"gpufed.io/job-id": record.id, "gpufed.io/state": "QUEUED"}
    assert obj["status"] == {}  # queued: nothing to mirror yet
    # a restart that lost the write-back (no job id on the hub object): the same job, not a second
    del obj["metadata"]["annotations"]
    again = hub_sync(service_over(store)[0], port)
    added(again, obj)
    assert [r.id for r in store.list_jobs()] == [record.id]
    assert again.submitted == 0 and sync.submitted == 1
    assert obj["metadata"]["annotations"]["gpufed.io/job-id"] == record.id


def test_an_object_not_managed_by_gpufed_is_left_alone(store: RedisStateStore) -> None:
    service, _ = service_over(store)
    port = FakeHub()
    obj = hub_job("theirs")
    obj["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert hub_sync(service, port).sync_object(JOB, port.put(obj)) is None
    assert store.list_jobs() == [] and port.writes == []


def test_the_member_status_is_mirrored_back_when_the_job_changes(store: RedisStateStore) -> None:
    service, gateway = service_over(store)
    store.put_summary(idle_h100_node("gpu-east", NOW))
    port, members = FakeHub(), Members()
    sync = hub_sync(service, port, members)
    obj = port.put(hub_job("train"))
    added(sync, obj)
    service.schedule_once()
    [record] = store.list_jobs()
    record = service.get(record.id)
    assert record.state is JobState.PLACED and record.workload_name is not None
    assert gateway.created_names() == [f"gpu-east/{record.workload_name}"]
    members.status[record.workload_name] = {
        "active": 1,
        "ready": 1,
        "startTime": "2026-12-02T10:00:05Z",
        "uncountedTerminatedPods": {},
    }
    sync.job_changed(record.id)  # what the change stream (or the member's watch) says
    sync.run_once()
    assert obj["status"] == {"active": 1, "ready": 1, "startTime": "2026-12-02T10:00:05Z"}
    assert obj["metadata"]["annotations"]["gpufed.io/cluster"] == "gpu-east"
    assert obj["metadata"]["annotations"]["gpufed.io/state"] == "PLACED"
    writes = len(port.writes)
    sync.job_changed(record.id)  # nothing new: nothing written
    sync.run_once()
    assert len(port.writes) == writes
    sync.job_changed("j-not-from-the-hub")  # another job: no work at all
    sync.run_once()
    assert len(port.writes) == writes


def test_a_refused_hub_job_is_said_once_on_the_hub_naming_the_field(store: RedisStateStore) -> None:
    service, _ = service_over(store)
    port = FakeHub()
    trail: list[AuditRecord] = []
    sync = hub_sync(service, port, audit=trail)
    obj = port.put(hub_job("two", containers=2))
    added(sync, obj)
    assert store.list_jobs() == []
    assert [(r.verb, r.object, r.outcome, r.code) for r in trail] == [
        ("submit", f"hub:jobs.batch/{NS}/two", "failure", 422)
    ]
    assert port.events == [
        ("two", "Warning", "Refused", "spec.template.spec.containers[1]: one container per pod is supported")
    ]
    failed = [c for c in obj["status"]["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "GpufedRefused"
    assert failed[0]["message"].startswith("spec.template.spec.containers[1]:")
    assert obj["metadata"]["annotations"] == {"gpufed.io/state": "REFUSED"}
    added(sync, obj)  # the write-back's own change comes back: not refused (or submitted) again
    assert len(port.events) == 1 and store.list_jobs() == []


def test_a_tenant_annotation_naming_another_tenant_is_refused(store: RedisStateStore) -> None:
    service, _ = service_over(store)
    port = FakeHub()
    obj = hub_job("sneaky")
    obj["metadata"]["annotations"] = {"gpufed.io/tenant": "finance"}
    added(hub_sync(service, port), port.put(obj))
    assert store.list_jobs() == []
    assert port.events[0][3].startswith(
        "metadata.annotations[gpufed.io/tenant]: the hub namespace team-a is tenant vision"
    )


def test_deleting_the_hub_object_cancels_its_job_and_so_does_the_reconcile(store: RedisStateStore) -> None:
    service, _ = service_over(store)
    port = FakeHub()
    trail: list[AuditRecord] = []
    sync = hub_sync(service, port, audit=trail)
    first, second = port.put(hub_job("first")), port.put(hub_job("second"))
    added(sync, first)
    added(sync, second)
    ids = {r.request.name: r.id for r in store.list_jobs()}
    del port.objects_[(JOB.resource, NS, "first")]
    sync.hub_event(JOB, "DELETED", first)
    sync.run_once()
    assert service.get(ids["first"]).state is JobState.CANCELLED
    # gone while no broker watched: found by the reconcile, but only from a synced cache
    del port.objects_[(JOB.resource, NS, "second")]
    port.is_synced = False
    assert sync.reconcile_deletes() == []
    assert service.get(ids["second"]).state is JobState.QUEUED
    port.is_synced = True
    assert sync.reconcile_deletes() == [ids["second"]]
    assert service.get(ids["second"]).state is JobState.CANCELLED
    assert sync.reconcile_deletes() == []
    # the audit trail has the hub's acts: two submits, two cancels, the subject the hub
    assert [(r.verb, r.object, r.tenant, r.subject, r.outcome) for r in trail] == [
        ("submit", f"job/{ids['first']}", "vision", "system:hub", "success"),
        ("submit", f"job/{ids['second']}", "vision", "system:hub", "success"),
        ("cancel", f"job/{ids['first']}", "vision", "system:hub", "success"),
        ("cancel", f"job/{ids['second']}", "vision", "system:hub", "success"),
    ]
    assert trail[2].reason == f"hub:jobs.batch/{NS}/first deleted"


@pytest.mark.race
def test_only_the_lease_holder_acts(store: RedisStateStore) -> None:
    service, _ = service_over(store)
    port = FakeHub()
    leading = threading.Event()
    sync = HubSync(service, port, Members(), leader=leading.is_set, tenant_mapping={NS: "vision"})
    obj = port.put(hub_job("train"))
    sync.start()
    try:
        sync.hub_event(JOB, "ADDED", obj)
        seen = sync.idle_passes
        poll_for("two follower passes after the event", lambda: sync.idle_passes >= seen + 2 or None, 10)
        assert store.list_jobs() == [] and port.writes == []
        leading.set()  # elected: every hub object is looked at
        poll_for("the hub Job submitted", lambda: store.list_jobs() or None, 10)
        poll_for("the job id written back", lambda: obj["metadata"].get("annotations") or None, 10)
    finally:
        sync.stop()


def test_a_job_id_annotation_naming_another_objects_job_is_not_trusted(store: RedisStateStore) -> None:
    """The annotation is anyone's to write on the hub: naming another object's (another tenant's) job
    shows that job's state nowhere and cancels nothing; the object gets its own job."""
    service, _ = service_over(store)
    port = FakeHub()
    sync = hub_sync(service, port)
    victim = port.put(hub_job("victim"))
    added(sync, victim)
    [theirs] = store.list_jobs()
    thief = hub_job("thief")
    thief["metadata"]["annotations"] = {"gpufed.io/job-id": theirs.id}
    forged = copy.deepcopy(thief)
    added(sync, port.put(thief))
    own = thief["metadata"]["annotations"]["gpufed.io/job-id"]
    assert own != theirs.id and service.get(own).request.source == f"hub:jobs.batch/{NS}/thief"
    sync.hub_event(JOB, "DELETED", {**forged, "metadata": {**forged["metadata"], "uid": "never-seen"}})
    sync.run_once()
    assert service.get(theirs.id).state is JobState.QUEUED
