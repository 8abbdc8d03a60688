"""migrate_job, drain and the stop paths in the service over real Redis with a fake clock (docs/migration.md).

The member clusters are summaries in the store and a gateway that records what it is asked and answers a
checkpoint stop as told (kubesim's real stops: tests/integration/test_checkpoint_moves.py). Covered: the
refusals (NotFound, Conflict with the reason), the checkpoint reference recorded and handed to the next
attempt, the hold that keeps a second attempt from starting while the first may still be saving, a hard
budget stop through the checkpoint path, a job that does not checkpoint stopped plainly, and the HTTP
routes' permissions (owner or admin migrates, only admins drain; the fleet views show a drained cluster).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx
import pytest
import uvicorn

from adapters.redis_burst import RedisBurstLedger
from adapters.redis_store import RedisStateStore
from broker import cli
from broker.api.routes import create_app
from broker.burst.gate import BurstGate
from broker.burst.settings import BurstSettings, TenantBurst
from broker.burst.spend import Budget, Period
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.errors import Conflict, NotFound
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    JobState,
    ProductCapacity,
    Tier,
)
from broker.core.workloads import WorkloadStatus
from broker.queue import queueing
from broker.scheduler.preemption import PreemptionPolicy
from broker.tenancy.auth import Principal, Role, TokenTable, digest
from broker.workload.manifest import job_id_label_value
from broker.workload.stop_path import STOP_MARGIN_SECONDS, STOP_START_SECONDS
from tests.conftest import free_port, wait_for
from tests.service_doubles import NOW, ManualClock, RecordingGateway, pods_ready

pytestmark = pytest.mark.integration

H100 = "H100-80GB"
TRAITS = {
    "c1": ClusterTraits("c1"),
    "c2": ClusterTraits("c2"),
    "cloud": ClusterTraits("cloud", tier=Tier.CLOUD, price_per_gpu_hour={H100: 4.25}),
}


def h100(cluster: str, free: int, tier: Tier = Tier.ONPREM, at: float = NOW) -> ClusterSummary:
    by_free = [0] * 9
    by_free[free] = 1
    return ClusterSummary(
        cluster=cluster,
        tier=tier,
        health=Health.HEALTHY,
        heartbeat=at,
        products=(ProductCapacity(H100, 81559, 8, 8, 8 - free, free, tuple(by_free), tuple(by_free), 1),),
    )


class CheckpointingGateway(RecordingGateway):
    """A RecordingGateway that keeps each Job's manifest and answers checkpoint stops as told."""

    def __init__(self) -> None:
        super().__init__(reads=pods_ready(1, only_live=True))
        self.manifests: dict[str, Mapping[str, Any]] = {}
        self.stops: list[tuple[str, str, int, int]] = []  # (cluster, name, attempt, grace)
        self.answer: tuple[str | None, bool] = ("s3://ckpt/step-100", True)
        self.stop_namespaces: list[str] = []

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        super().create_workload(cluster, job, companions)
        self.manifests[job["metadata"]["name"]] = job

    def stop_for_checkpoint(
        self,
        cluster: str,
        namespace: str,
        name: str,
        job_id: str,
        attempt: int,
        grace_seconds: int,
        wait_seconds: float,
    ) -> tuple[str | None, bool]:
        self.stops.append((cluster, name, attempt, grace_seconds))
        self.stop_namespaces.append(namespace)
        self.delete_workload(cluster, namespace, name)
        return self.answer

    def reported_checkpoints(self, cluster: str, namespace: str) -> dict[tuple[str, int], str]:
        return {}

    def env(self, name: str) -> dict[str, str]:
        container = self.manifests[name]["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e["value"] for e in container.get("env") or ()}


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="migrate" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def _service(
    store: RedisStateStore, burst: BurstSettings | None = None
) -> tuple[BrokerService, CheckpointingGateway, ManualClock]:
    clock, gw = ManualClock(), CheckpointingGateway()
    gate = BurstGate(RedisBurstLedger(store.client, store.prefix), burst) if burst is not None else None
    return BrokerService(store, gw, clock, TRAITS, burst=gate), gw, clock


def _running(svc: BrokerService, store: RedisStateStore, request: JobRequest) -> str:
    job_id = svc.submit(request)[0].id
    svc.schedule_once()
    svc.sync_status()
    assert svc.get(job_id).state is JobState.RUNNING, svc.get(job_id).reason
    return job_id


def _job(name: str, grace: int | None = 60, **kw: Any) -> JobRequest:
    return JobRequest(name, tenant="ml", gpus_per_pod=8, checkpoint_grace_seconds=grace, **kw)


def test_migrate_refuses_with_the_reason(store: RedisStateStore) -> None:
    svc, _, _ = _service(store)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    with pytest.raises(NotFound):
        svc.migrate_job("j-none", to_cluster=None, reason="r", by="ops")
    running = _running(svc, store, _job("a", clusters=("c1", "c2")))
    here = svc.get(running).cluster
    with pytest.raises(Conflict, match="already runs on"):
        svc.migrate_job(running, to_cluster=here, reason="r", by="ops")
    with pytest.raises(Conflict, match="no member cluster 'mars'"):
        svc.migrate_job(running, to_cluster="mars", reason="r", by="ops")
    with pytest.raises(Conflict, match="may run only on c1, c2"):
        svc.migrate_job(running, to_cluster="cloud", reason="r", by="ops")
    pinned = _running(
        svc, store, _job("b", clusters=("c1",)) if here == "c2" else _job("b", clusters=("c2",))
    )
    with pytest.raises(Conflict, match="may run on no cluster other than"):
        svc.migrate_job(pinned, to_cluster=None, reason="r", by="ops")
    queued = svc.submit(_job("c", clusters=("c1",)))[0].id
    with pytest.raises(Conflict, match="is queued, not running anywhere"):
        svc.migrate_job(queued, to_cluster=None, reason="r", by="ops")
    svc.cancel(queued)
    with pytest.raises(Conflict, match="already CANCELLED"):
        svc.migrate_job(queued, to_cluster=None, reason="r", by="ops")


def test_a_migrated_job_hands_its_checkpoint_to_the_next_attempt_on_the_target(
    store: RedisStateStore,
) -> None:
    svc, gw, clock = _service(store)
    store.put_summary(h100("c1", 8))
    store.put_summary(h100("c2", 0))
    job_id = _running(svc, store, _job("train"))
    first = svc.get(job_id)
    assert first.cluster == "c1" and gw.env(first.workload_name or "") == {"GPUFED_ATTEMPT": "1"}
    clock.t += 600
    moved = svc.migrate_job(job_id, to_cluster="c2", reason="rebalance", by="alice")
    assert gw.stops == [("c1", first.workload_name, 1, 60)]
    stopped = svc.get(job_id)
    assert stopped.state is JobState.QUEUED and stopped.move_to == ("c2",) and stopped.cluster is None
    assert stopped.resume_from == "s3://ckpt/step-100"
    assert stopped.not_before <= clock.t  # its pods are gone: no need to wait out the grace period
    assert moved.reason.startswith("migrating from c1 (rebalance; by alice); stopping attempt 1 with a 60 s")
    reasons = [e.reason for e in svc.events(job_id)]
    assert (
        "checkpoint of attempt 1 on c1: s3://ckpt/step-100; the next attempt resumes from s3://ckpt/step-100"
        in reasons
    )
    store.put_summary(h100("c1", 0, at=clock.t))  # c1 is free again but the move asked for c2
    store.put_summary(h100("c2", 8, at=clock.t))
    svc.schedule_once()
    second = svc.get(job_id)
    assert (second.state, second.cluster, second.attempt, second.move_to) == (JobState.PLACED, "c2", 2, ())
    assert gw.env(second.workload_name or "") == {
        "GPUFED_ATTEMPT": "2",
        "GPUFED_RESUME_FROM": "s3://ckpt/step-100",
    }


def test_the_next_attempt_waits_while_the_old_one_may_still_be_saving(store: RedisStateStore) -> None:
    svc, gw, clock = _service(store)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    job_id = _running(svc, store, _job("slow", clusters=("c1", "c2")))
    source = svc.get(job_id).cluster
    gw.answer = (None, False)  # the pods were not seen gone in time, and said nothing
    svc.migrate_job(job_id, to_cluster=None, reason="r", by="ops")
    held = svc.get(job_id)
    # held from the requeue for the grace period, the margin and the stop's start
    assert held.not_before == pytest.approx(clock.t + 60 + STOP_MARGIN_SECONDS + STOP_START_SECONDS)
    assert held.resume_from is None
    assert any(
        f"attempt 1 on {source} stopped without a checkpoint reference" in e.reason
        for e in svc.events(job_id)
    )
    svc.schedule_once()
    assert svc.get(job_id).state is JobState.QUEUED  # not while the old attempt may still run
    clock.t = held.not_before + 1
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8, at=clock.t))
    svc.schedule_once()
    placed = svc.get(job_id)
    assert placed.state is JobState.PLACED and placed.cluster != source
    assert "GPUFED_RESUME_FROM" not in gw.env(placed.workload_name or "")  # from scratch: nothing was saved


def test_a_job_that_does_not_checkpoint_is_stopped_plainly(store: RedisStateStore) -> None:
    svc, gw, clock = _service(store)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    job_id = _running(svc, store, _job("plain", grace=None, clusters=("c1", "c2")))
    name = svc.get(job_id).workload_name
    moved = svc.migrate_job(job_id, to_cluster=None, reason="r", by="ops")
    assert gw.stops == [] and gw.deleted == [name]
    assert moved.not_before <= clock.t and "grace" not in moved.reason
    assert "GPUFED_ATTEMPT" not in gw.env(name or "")


def test_a_hard_budget_stop_goes_through_the_checkpoint_path(store: RedisStateStore) -> None:
    budget = BurstSettings(tenants={"ml": TenantBurst(budget=Budget(20.0, Period.MONTH, hard=True))})
    svc, gw, clock = _service(store, budget)
    store.put_summary(h100("c1", 8))
    store.put_summary(h100("cloud", 8, Tier.CLOUD))
    _running(svc, store, _job("filler", grace=None, clusters=("c1",), duration_seconds=36000))
    store.put_summary(h100("c1", 0))
    job_id = svc.submit(_job("burst", allow_burst=True, duration_seconds=1440))[0].id
    svc.schedule_once()
    name = svc.get(job_id).workload_name
    assert svc.get(job_id).cluster == "cloud" and name is not None
    gw.status[name] = WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)
    clock.t = NOW + 60
    store.put_summary(h100("cloud", 0, Tier.CLOUD, at=clock.t))
    svc.sync_status()
    clock.t = NOW + 60 + 2160  # $20.40 run up: the budget is spent
    assert [r.id for r in svc.enforce_budgets()] == [job_id]
    assert gw.stops == [("cloud", name, 1, 60)]
    stopped = svc.get(job_id)
    assert stopped.state is JobState.QUEUED and stopped.resume_from == "s3://ckpt/step-100"
    assert stopped.reason.startswith("checkpoint of attempt 1 on cloud")
    assert any(
        "hard budget: tenant ml has spent $20.40" in e.reason and "60 s checkpoint grace" in e.reason
        for e in svc.events(job_id)
    )


# --------------------------------------------------------------------------- the routes

TOKENS = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789ab",
    "root": "root-token-0123456789a",
    "watcher": "watcher-token-01234567",
}
PRINCIPALS = {
    "alice": Principal("alice", "ml", Role.USER),
    "bob": Principal("bob", "vision", Role.USER),
    "root": Principal("root", "ops", Role.ADMIN),
    "watcher": Principal("watcher", "ops", Role.VIEWER),
}


def _call(app: Any, who: str, method: str, path: str, **kw: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gpufed") as client:
            headers = {"Authorization": f"Bearer {TOKENS[who]}"}
            return await client.request(method, path, headers=headers, **kw)

    return asyncio.run(go())


def test_the_routes_let_the_owner_or_an_admin_migrate_and_only_admins_drain(store: RedisStateStore) -> None:
    svc, _, clock = _service(store)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    tokens = TokenTable({digest(TOKENS[w]): p for w, p in PRINCIPALS.items()})
    app = create_app(svc, clock, tokens=tokens)
    job_id = _running(svc, store, _job("routed", clusters=("c1", "c2")))
    source = svc.get(job_id).cluster
    other = "c2" if source == "c1" else "c1"
    assert _call(app, "bob", "POST", f"/v1/jobs/{job_id}/migrate", json={}).status_code == 404
    assert _call(app, "watcher", "POST", f"/v1/jobs/{job_id}/migrate", json={}).status_code == 403
    r = _call(app, "alice", "POST", f"/v1/jobs/{job_id}/migrate", json={"to": other, "reason": "closer data"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "QUEUED" and "closer data; by alice" in r.json()["reason"]
    shown = _call(app, "alice", "GET", f"/v1/jobs/{job_id}").json()
    assert shown["resumeFrom"] == "s3://ckpt/step-100" and shown["request"]["checkpointGraceSeconds"] == 60
    again = _call(app, "root", "POST", f"/v1/jobs/{job_id}/migrate", json={})
    assert again.status_code == 409 and "not running anywhere" in again.text
    bad = _call(app, "alice", "POST", f"/v1/jobs/{job_id}/migrate", json={"to": ""})
    assert bad.status_code == 422 and "to" in bad.text

    assert _call(app, "alice", "POST", f"/v1/clusters/{other}/drain", json={}).status_code == 403
    svc.schedule_once()  # the job goes to `other`, which is then drained: it moves again
    assert svc.get(job_id).cluster == other
    r = _call(app, "root", "POST", f"/v1/clusters/{other}/drain", json={"reason": "firmware"})
    assert r.status_code == 200 and r.json()["moved"] == [job_id]
    assert _call(app, "root", "POST", "/v1/clusters/mars/drain", json={}).status_code == 404
    [view] = [c for c in _call(app, "root", "GET", "/v1/clusters").json()["items"] if c["name"] == other]
    assert view["drained"] is True and view["fenced"] == "drained by root: firmware"
    svc.observe_clusters()  # health does not lift a drain
    assert store.fenced() == {other: "drained by root: firmware"}
    r = _call(app, "root", "POST", f"/v1/clusters/{other}/undrain")
    assert r.status_code == 200 and r.json()["wasDrained"] is True and store.fenced() == {}


class ReportingGateway(CheckpointingGateway):
    """Its pods report periodic checkpoints (the annotation gpufed.io/checkpoint)."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: dict[tuple[str, int], str] = {}

    def reported_checkpoints(self, cluster: str, namespace: str) -> dict[tuple[str, int], str]:
        return dict(self.reported)


def test_a_lost_clusters_job_resumes_from_the_checkpoint_its_pod_last_reported(
    store: RedisStateStore,
) -> None:
    clock, gw = ManualClock(), ReportingGateway()
    svc = BrokerService(store, gw, clock, TRAITS)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    job_id = _running(svc, store, _job("far", clusters=("c1", "c2")))
    source = svc.get(job_id).cluster
    assert source is not None
    gw.reported[(job_id_label_value(job_id), 1)] = "s3://ckpt/step-50"
    svc.note_reported_checkpoints()
    assert svc.get(job_id).resume_from == "s3://ckpt/step-50"
    gw.reported[(job_id_label_value(job_id), 1)] = "s3://ckpt/step-60"
    svc.note_reported_checkpoints()  # read again only after REPORTED_CHECKPOINT_SECONDS
    assert svc.get(job_id).resume_from == "s3://ckpt/step-50"
    clock.t += 40
    other = "c2" if source == "c1" else "c1"
    store.put_summary(h100(other, 8, at=clock.t))
    lost = replace(
        h100(source, 0, at=clock.t - 20), health=Health.UNREACHABLE, health_reason="connection refused"
    )
    store.put_summary(lost)
    [moved] = svc.observe_clusters()  # lost: it cannot be asked, and the newest report was not read yet
    assert moved.state is JobState.QUEUED and moved.resume_from == "s3://ckpt/step-50"
    assert gw.stops == []
    svc.schedule_once()
    placed = svc.get(job_id)
    assert placed.cluster == other
    assert gw.env(placed.workload_name or "")["GPUFED_RESUME_FROM"] == "s3://ckpt/step-50"


def test_a_member_leaving_moves_its_checkpointing_jobs_and_leaves_the_others_running(
    store: RedisStateStore,
) -> None:
    clock, gw = ManualClock(), CheckpointingGateway()
    traits = {
        "c1": ClusterTraits("c1", tenant_namespace="team-{tenant}"),
        "c2": ClusterTraits("c2"),
    }
    svc = BrokerService(store, gw, clock, traits)
    store.put_summary(h100("c1", 8))
    store.put_summary(h100("c2", 0))
    saver = _running(
        svc, store, JobRequest("saver", tenant="ml", gpus_per_pod=4, checkpoint_grace_seconds=30)
    )
    plain = _running(svc, store, JobRequest("plain", tenant="ml", gpus_per_pod=4))
    assert svc.get(saver).cluster == svc.get(plain).cluster == "c1"
    svc.set_traits({"c2": traits["c2"]}, at_once=True)  # c1's ClusterProfile was deleted
    assert [(c, attempt, grace) for c, _, attempt, grace in gw.stops] == [("c1", 1, 30)]
    assert gw.stop_namespaces == ["team-ml"]  # its Job's namespace, though c1's traits are gone
    moved = svc.get(saver)
    assert moved.state is JobState.QUEUED and moved.resume_from == "s3://ckpt/step-100"
    assert any("cluster c1 left the fleet" in e.reason for e in svc.events(saver))
    assert svc.get(plain).state is JobState.RUNNING  # followed to its end there, as before


def test_the_cli_migrates_drains_and_shows_the_drained_cluster(
    store: RedisStateStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, _, clock = _service(store)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    tokens = TokenTable({digest(TOKENS[w]): p for w, p in PRINCIPALS.items()})
    app = create_app(svc, clock, tokens=tokens)
    job_id = _running(svc, store, _job("cli", clusters=("c1", "c2")))
    source = svc.get(job_id).cluster
    assert source is not None
    other = "c2" if source == "c1" else "c1"
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    monkeypatch.setenv("GPUFED_CONFIG", os.devnull)
    monkeypatch.setenv("GPUFED_URL", f"http://127.0.0.1:{port}")

    def gpufed(who: str, *argv: str) -> tuple[int, str, str]:
        monkeypatch.setenv("GPUFED_TOKEN", TOKENS[who])
        capsys.readouterr()
        code = cli.run(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    try:
        wait_for(lambda: server.started, timeout=30, what="the API to listen")
        code, out, err = gpufed("alice", "migrate", job_id, "--to", other, "--reason", "closer data")
        assert code == 0, err
        assert "QUEUED" in out and "closer data; by alice" in out
        code, _, err = gpufed("alice", "migrate", job_id)
        assert code == 1 and "not running anywhere" in err
        code, _, err = gpufed("alice", "drain", other)
        assert code == 4 and "only admins drain clusters" in err
        code, out, err = gpufed("root", "drain", source, "--reason", "firmware")
        assert code == 0 and f"cluster {source} drained; 0 job(s) moved" in out, err
        code, out, _ = gpufed("root", "fleet", "-o", "json")
        drained = {c["cluster"]: c["drained"] for c in json.loads(out)["clusters"]}
        assert drained == {source: True, other: False}
        code, out, _ = gpufed("root", "fleet")
        assert f"{source} is drained by root: firmware" in out
        code, out, _ = gpufed("root", "undrain", source)
        assert code == 0 and f"cluster {source} undrained" in out
        code, out, err = gpufed(
            "alice", "submit", "saver", "--gpus", "8", "--checkpoint-grace", "45", "-o", "json"
        )
        assert code == 0, err
        assert svc.get(json.loads(out)["id"]).request.checkpoint_grace_seconds == 45
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class DeferredDispatcher:
    """Keeps the tasks until the test runs them: a cluster's dispatcher threads all busy."""

    def __init__(self) -> None:
        self.tasks: list[Callable[[], object]] = []

    def submit(self, cluster: str, task: Callable[[], object]) -> None:
        self.tasks.append(task)

    def submit_once(self, cluster: str, key: str, task: Callable[[], object]) -> bool:
        self.tasks.append(task)
        return True

    def wait_idle(self, timeout: float) -> bool:
        return not self.tasks

    def close(self) -> None:
        self.tasks.clear()

    def run(self) -> None:
        tasks, self.tasks = self.tasks, []
        for task in tasks:
            task()


def test_a_stop_that_starts_late_holds_the_next_attempt_from_when_it_starts(store: RedisStateStore) -> None:
    svc, gw, clock = _service(store)
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8))
    job_id = _running(svc, store, _job("late", clusters=("c1", "c2")))
    deferred = DeferredDispatcher()
    svc.dispatcher = deferred
    t0 = clock.t
    svc.migrate_job(job_id, to_cluster=None, reason="r", by="ops")
    assert gw.stops == [] and len(deferred.tasks) == 1  # the stop waits for a thread
    clock.t = t0 + 100  # within the first hold (grace 60 + margin 10 + start allowance 60)
    gw.answer = (None, False)  # its pods are not seen gone within the grace period
    deferred.run()
    assert svc.get(job_id).not_before == pytest.approx(t0 + 100 + 60 + STOP_MARGIN_SECONDS)
    clock.t = t0 + 140  # past the first hold: still held, the old attempt may be saving
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8, at=clock.t))
    svc.schedule_once()
    assert svc.get(job_id).state is JobState.QUEUED
    clock.t = t0 + 171
    for c in ("c1", "c2"):
        store.put_summary(h100(c, 8, at=clock.t))
    svc.schedule_once()
    assert svc.get(job_id).state is JobState.PLACED


def test_a_preemptor_waits_for_its_checkpointing_victims_to_save_before_taking_more(
    store: RedisStateStore,
) -> None:
    clock, gw = ManualClock(), CheckpointingGateway()
    settings = ServiceSettings(
        queue=queueing.QueuePolicy(priorities={"production": 100000, "batch": 0}),
        preemption=PreemptionPolicy(frozenset({"production"}), max_per_tenant=5, max_global=5),
    )
    svc = BrokerService(store, gw, clock, {"c1": TRAITS["c1"]}, settings=settings)
    store.put_summary(h100("c1", 8))

    def four(name: str) -> JobRequest:
        return JobRequest(
            name, tenant="ml", gpus_per_pod=4, priority_class="batch", checkpoint_grace_seconds=120
        )

    first = _running(svc, store, four("first"))
    clock.t += 3600
    store.put_summary(h100("c1", 4, at=clock.t))
    second = _running(svc, store, four("second"))
    store.put_summary(h100("c1", 0, at=clock.t))  # both counted: the node is full
    urgent = svc.submit(JobRequest("urgent", tenant="ops", gpus_per_pod=4, priority_class="production"))[0].id
    svc.schedule_once()
    assert svc.get(second).state is JobState.QUEUED  # the younger one: less work lost
    assert svc.get(first).state is JobState.RUNNING
    clock.t += 40  # the default settle (30 s) is over, but the victim may still be saving for 120 s
    store.put_summary(h100("c1", 0, at=clock.t))
    svc.schedule_once()
    assert svc.get(first).state is JobState.RUNNING  # not a second victim meanwhile
    assert svc.get(urgent).state is JobState.QUEUED
