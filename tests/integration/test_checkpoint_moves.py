"""Jobs that move without starting over (docs/migration.md), on real parts: kubesim's member clusters over
HTTPS (its simulated checkpoints: a pod that honours the contract saves on SIGTERM and writes
`progress=<s>` to its termination message, and started with GPUFED_RESUME_FROM runs only the rest), the
broker's pollers, gateway and service over real Redis. One fleet for the module.

Each move: a running checkpointing job is stopped, attempt 2 runs elsewhere with GPUFED_RESUME_FROM set
from attempt 1's termination message, and runs only the remainder, so the job's simulated run time is
about its duration plus the save, not its duration plus the time already run (kubesim's clock, read from
the pods' container states: no wall-clock timing). The moves: `migrate` to a named cluster, a preemption
victim, a hard budget stop (cloud to on-prem) and `drain`. Then a race: while a migrate's stop is under way on the dispatcher's threads, no
second attempt is ever alive beside the first.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.cluster_watcher import ClusterWatcher
from adapters.kube_gateway import KubeGateway
from adapters.kube_rest import KubeRest
from adapters.redis_burst import RedisBurstLedger
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.burst.gate import BurstGate
from broker.burst.settings import BurstSettings, TenantBurst
from broker.burst.spend import Budget, Period
from broker.controller.dispatch import ConcurrentDispatcher, InlineDispatcher
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.model import ClusterTraits, JobRecord, JobRequest, JobState, Tier
from broker.core.records import Run
from broker.queue import queueing
from broker.scheduler.preemption import PreemptionPolicy
from broker.workload.manifest import JOB_ID_LABEL, job_id_label_value
from kubesim.controllers.checkpoints import ANN_CHECKPOINT_EVERY, ANN_CHECKPOINT_SECONDS
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

SPEED = 100.0  # simulated seconds per wall second
DURATION = 400.0  # simulated seconds of work per job
SAVE = 5.0  # simulated seconds a save takes after SIGTERM
GRACE = 30  # the jobs' checkpoint grace period
# four on-prem clusters of one 8-GPU node: sim-000 H100, sim-001 A100, sim-002 H200, sim-003 L4, and a
# priced cloud one, sim-004 (H100)
CLUSTERS = [f"sim-{i:03d}" for i in range(5)]
CLOUD = "sim-004"
PRICE = 9.0  # $ per GPU-hour on the cloud cluster
TRAITS = {c: ClusterTraits(c) for c in CLUSTERS[:4]} | {
    CLOUD: ClusterTraits(CLOUD, tier=Tier.CLOUD, price_per_gpu_hour={"H100-80GB": PRICE})
}
BUDGET = 20.0  # tenant fin's hard monthly budget


def _epoch(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


class Fleet:
    def __init__(self, sim: Simulation, redis_url: str) -> None:
        self.sim = sim
        self.store = RedisStateStore(redis_url, prefix="ckpt" + uuid.uuid4().hex[:8])
        self.watchers = {
            c: ClusterWatcher(c, sim.kubeconfig_path(c), flush_interval_s=0.02) for c in CLUSTERS
        }
        for w in self.watchers.values():
            w.start()
        self.gateway = KubeGateway.from_kubeconfigs({c: (sim.kubeconfig_path(c), None) for c in CLUSTERS})
        settings = ServiceSettings(
            queue=queueing.QueuePolicy(priorities={"production": 100000, "batch": 0}),
            preemption=PreemptionPolicy(frozenset({"production"}), max_per_tenant=5, max_global=10),
        )
        burst = BurstSettings(tenants={"fin": TenantBurst(budget=Budget(BUDGET, Period.MONTH, hard=True))})
        self.ledger = RedisBurstLedger(self.store.client, self.store.prefix)
        self.service = BrokerService(
            self.store,
            self.gateway,
            SystemClock(),
            TRAITS,
            settings=settings,
            burst=BurstGate(self.ledger, burst),
        )
        self._lock = threading.Lock()

    def step(self) -> None:
        """One turn of the control loop: publish every cluster, fail over, place, follow."""
        with self._lock:
            for c, w in self.watchers.items():
                self.store.put_summary(w.summary(TRAITS[c]))
            self.service.observe_clusters()
            self.service.enforce_budgets()
            self.service.schedule_once()
            self.service.sync_status()

    def stepped(self) -> bool:
        """step(), for wait_for: whether every cluster has a summary in the store."""
        self.step()
        return all(self.store.get_summary(c) for c in CLUSTERS)

    def resume_from(self, job_id: str) -> str | None:
        self.step()
        return self.service.get(job_id).resume_from

    def state(self, job_id: str) -> JobState:
        self.step()
        return self.service.get(job_id).state

    def submit(self, name: str, *, checkpoint: bool = True, every: float | None = None, **kw: Any) -> str:
        annotations = {ANN_CHECKPOINT_SECONDS: f"{SAVE:g}"} if checkpoint else {}
        if every is not None:  # it also reports a checkpoint every that many seconds while it runs
            annotations[ANN_CHECKPOINT_EVERY] = f"{every:g}"
        request = JobRequest(
            name,
            tenant=kw.pop("tenant", "ml"),
            gpus_per_pod=4,
            duration_seconds=kw.pop("duration", DURATION),
            checkpoint_grace_seconds=GRACE if checkpoint else None,
            pod_annotations=annotations,
            **kw,
        )
        return self.service.submit(request)[0].id

    def pods(self, job_id: str) -> dict[int, dict[str, Any]]:
        """attempt -> its pod (any cluster), as kubesim holds it."""
        out: dict[int, dict[str, Any]] = {}
        for c in CLUSTERS:
            for pod in self.sim.store(c).list("pods")[0]:
                labels = pod["metadata"].get("labels") or {}
                if labels.get(JOB_ID_LABEL) == job_id_label_value(job_id):
                    out[int(labels["gpufed.io/attempt"])] = pod
        return out

    def progress(self, job_id: str, attempt: int) -> float:
        """Simulated seconds the attempt's pod has run (kubesim's clock)."""
        pod = self.pods(job_id).get(attempt)
        started = ((pod or {}).get("status") or {}).get("startTime")
        return self.sim.clock.now() - _epoch(started) if started else 0.0

    def running_for(self, job_id: str, seconds: float) -> None:
        wait_for(lambda: self.state(job_id) is JobState.RUNNING, timeout=30, what=f"{job_id} running")
        wait_for(lambda: self.progress(job_id, 1) >= seconds, timeout=30, what=f"{job_id} {seconds:g} s in")

    def close(self) -> None:
        for w in self.watchers.values():
            w.stop()
        self.gateway.close()
        self.store.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("ckpt")
    with Simulation(synthetic_fleet(5, 1), tmp / "sim", speed=SPEED) as sim:
        for c in CLUSTERS:  # the priority classes the jobs name (kubesim admits pods by them)
            rest = KubeRest.from_kubeconfig(c, sim.kubeconfig_path(c))
            for name, value in (("production", 100000), ("batch", 0)):
                rest.request(
                    "POST",
                    "/apis/scheduling.k8s.io/v1/priorityclasses",
                    body={
                        "apiVersion": "scheduling.k8s.io/v1",
                        "kind": "PriorityClass",
                        "metadata": {"name": name},
                        "value": value,
                    },
                )
            rest.close()
        f = Fleet(sim, redis_url)
        try:
            wait_for(
                f.stepped,
                timeout=30,
                what="every cluster's summary",
            )
            yield f
        finally:
            f.close()


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or ()}


def _resumed_elsewhere(fleet: Fleet, job_id: str, source: str) -> tuple[float, JobRecord]:
    """Wait for the job to finish at attempt 2; check it resumed from attempt 1's termination message
    and ran only the rest. Returns (attempt 1's progress, the finished record)."""
    wait_for(lambda: fleet.state(job_id) is JobState.SUCCEEDED, timeout=60, what=f"{job_id} to finish")
    record = fleet.service.get(job_id)
    assert record.attempt == 2 and record.cluster != source
    assert record.resume_from is not None and record.resume_from.startswith("progress=")
    done = float(record.resume_from.removeprefix("progress="))
    events = [e.reason for e in fleet.service.events(job_id)]
    assert any(f"checkpoint of attempt 1 on {source}: {record.resume_from}" in r for r in events), events
    pod = fleet.pods(job_id)[2]
    env = _env(pod)
    assert env["GPUFED_RESUME_FROM"] == record.resume_from and env["GPUFED_ATTEMPT"] == "2"
    assert pod["spec"]["terminationGracePeriodSeconds"] == GRACE
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    ran = _epoch(terminated["finishedAt"]) - _epoch(terminated["startedAt"])
    # attempt 2 ran only the remainder: the whole is the duration (+ the save), not duration + done
    # (kubesim's timestamps are whole seconds)
    assert done >= 100.0  # it had really run before the move: resuming saved that much
    assert ran == pytest.approx(DURATION - done, abs=2.0), (done, ran)
    return done, record


def test_migrate_moves_a_running_job_to_the_named_cluster_and_it_resumes_there(fleet: Fleet) -> None:
    job_id = fleet.submit("moved", clusters=("sim-000", "sim-001"), every=50)
    fleet.running_for(job_id, 120)
    source = fleet.service.get(job_id).cluster
    assert source is not None
    # its periodic checkpoint (pod annotation gpufed.io/checkpoint), read by the broker: what it would
    # resume from were its cluster lost now
    fleet.service.note_reported_checkpoints()
    reported = fleet.service.get(job_id).resume_from or ""
    assert reported.startswith("progress=") and 50 <= float(reported.removeprefix("progress=")) < 150, (
        reported
    )
    target = "sim-001" if source == "sim-000" else "sim-000"
    moved = fleet.service.migrate_job(job_id, to_cluster=target, reason="rebalancing", by="ops")
    assert moved.state is JobState.QUEUED and moved.move_to == (target,)
    _, record = _resumed_elsewhere(fleet, job_id, source)
    assert record.cluster == target


def test_a_preemption_victim_saves_and_resumes_elsewhere(fleet: Fleet) -> None:
    def filler(cluster: str) -> str:
        job_id = fleet.submit(
            "filler", checkpoint=False, clusters=(cluster,), priority_class="batch", duration=4000
        )
        wait_for(lambda: fleet.state(job_id) is JobState.RUNNING, timeout=30, what="a filler running")
        return job_id

    # sim-002 half full, sim-003 full: the victim can start only on sim-002
    fillers = [filler("sim-002"), filler("sim-003"), filler("sim-003")]
    victim = fleet.submit("victim", clusters=("sim-002", "sim-003"), priority_class="batch")
    fleet.running_for(victim, 120)
    assert fleet.service.get(victim).cluster == "sim-002"
    urgent = fleet.submit(
        "urgent", checkpoint=False, clusters=("sim-002",), priority_class="production", duration=50
    )
    wait_for(lambda: fleet.resume_from(victim), timeout=30, what="a preemption")
    assert any("preempted by" in e.reason for e in fleet.service.events(victim))
    assert fleet.service.get(fillers[0]).state is JobState.RUNNING  # it had run longer: not the victim
    fleet.service.cancel(fillers[1])  # room on sim-003 for the victim
    _resumed_elsewhere(fleet, victim, "sim-002")
    wait_for(lambda: fleet.state(urgent) is JobState.SUCCEEDED, timeout=30, what="the urgent job")
    for f in (fillers[0], fillers[2]):
        fleet.service.cancel(f)


def test_drain_moves_the_running_jobs_with_their_checkpoints_and_places_nothing_there(fleet: Fleet) -> None:
    job_id = fleet.submit("drained", clusters=("sim-003", "sim-002"))
    fleet.running_for(job_id, 120)
    source = fleet.service.get(job_id).cluster
    assert source is not None
    moved = fleet.service.drain_cluster(source, reason="firmware", by="ops")
    assert [r.id for r in moved] == [job_id]
    assert fleet.store.fenced()[source] == "drained by ops: firmware"
    _resumed_elsewhere(fleet, job_id, source)
    # no new work there while drained: a job that may run only there waits, saying so
    waiting = fleet.submit("blocked", checkpoint=False, clusters=(source,), duration=20)
    for _ in range(3):
        fleet.step()
    assert fleet.service.get(waiting).state is JobState.QUEUED
    assert fleet.service.undrain_cluster(source)
    wait_for(lambda: fleet.state(waiting) is JobState.SUCCEEDED, timeout=30, what="placed once undrained")


def test_a_hard_budget_stop_saves_and_the_job_resumes_on_prem(fleet: Fleet) -> None:
    # sim-003 full: the job bursts to the priced cloud cluster (its expected cost fits the budget)
    blockers = [
        fleet.submit("blocker", checkpoint=False, clusters=("sim-003",), tenant="ops", duration=4000)
        for _ in range(2)
    ]
    wait_for(
        lambda: all(fleet.state(b) is JobState.RUNNING for b in blockers),
        timeout=30,
        what="the blockers running",
    )
    job_id = fleet.submit("paid", tenant="fin", clusters=("sim-003", CLOUD), allow_burst=True)
    fleet.running_for(job_id, 120)
    assert fleet.service.get(job_id).cluster == CLOUD
    # the tenant's other cloud work, settled meanwhile, spends the rest of its budget
    now = fleet.service.clock.now()
    fleet.ledger.add_run(Run("jother", 1, "fin", CLOUD, "H100-80GB", 8, PRICE, now - 3600, now))
    wait_for(lambda: fleet.resume_from(job_id), timeout=30, what="the hard budget stop")
    assert any("hard budget: tenant fin has spent" in e.reason for e in fleet.service.events(job_id))
    fleet.service.cancel(blockers[0])  # room on-prem: over budget, it waits for on-prem, not the cloud
    _resumed_elsewhere(fleet, job_id, CLOUD)
    assert fleet.service.get(job_id).cluster == "sim-003"
    fleet.service.cancel(blockers[1])


@pytest.mark.race
def test_a_migrate_never_leaves_two_live_attempts(fleet: Fleet) -> None:
    """The stop runs on the dispatcher's threads while passes go on: every look at the fleet finds at
    most one attempt of the job with a live pod (Pending or Running: the old one while it saves too)."""
    fleet.service.dispatcher = ConcurrentDispatcher(2)
    try:
        job_id = fleet.submit("raced", clusters=("sim-000", "sim-001"))
        fleet.running_for(job_id, 120)
        seen_live: list[list[int]] = []

        def live() -> list[int]:
            pods = fleet.pods(job_id).items()
            return sorted(
                a for a, pod in pods if (pod.get("status") or {}).get("phase") in ("Pending", "Running")
            )

        fleet.service.migrate_job(job_id, to_cluster=None, reason="race", by="ops")

        def finished() -> bool:
            seen_live.append(live())
            return fleet.state(job_id) is JobState.SUCCEEDED

        wait_for(finished, timeout=60, interval=0.01, what="the raced job to finish")
        assert all(len(attempts) <= 1 for attempts in seen_live), seen_live
        assert [2] in seen_live  # attempt 2 was seen alive: the check looked while it ran
        assert fleet.service.get(job_id).resume_from is not None
    finally:
        fleet.service.dispatcher.close()
        fleet.service.dispatcher = InlineDispatcher()


def test_a_migrate_off_a_member_that_is_down_resumes_elsewhere_at_once_from_the_reported_checkpoint(
    fleet: Fleet,
) -> None:
    """Issue 48 finding 8: the member is down (not yet declared lost), so the checkpoint stop cannot reach
    it. The next attempt used to be held back for the stop's whole grace, margin and start (here
    30 + 10 + 60 s of wall clock) and the job then started afresh; now the failed stop falls through to
    the failover path at once and attempt 2 resumes from the checkpoint the job last reported. The
    deadline below (45 s) is shorter than the old hold by construction, not a measure of speed."""
    job_id = fleet.submit("down-source", clusters=("sim-000", "sim-001"), every=50, duration=100_000)
    fleet.running_for(job_id, 120)
    source = fleet.service.get(job_id).cluster
    assert source is not None

    def noted() -> str | None:  # read at most every 30 s (REPORTED_CHECKPOINT_SECONDS)
        fleet.service.note_reported_checkpoints()
        return fleet.service.get(job_id).resume_from

    reported = str(wait_for(noted, timeout=60, interval=0.5, what="the periodic checkpoint noted"))
    assert reported.startswith("progress="), reported
    target = "sim-001" if source == "sim-000" else "sim-000"
    fleet.sim.faults(source).down()
    try:
        fleet.service.migrate_job(job_id, to_cluster=target, reason="maintenance", by="ops")

        def resumed() -> bool:
            fleet.step()
            record = fleet.service.get(job_id)
            return record.attempt == 2 and record.cluster == target and record.state is JobState.RUNNING

        wait_for(resumed, timeout=45, interval=0.2, what=f"attempt 2 running on {target}")
        pod = fleet.pods(job_id)[2]
        assert _env(pod)["GPUFED_RESUME_FROM"] == reported
        events = [e.reason for e in fleet.service.events(job_id)]
        assert any(f"cannot reach {source} to stop attempt 1" in r and reported in r for r in events), events
    finally:
        fleet.sim.faults(source).up()
        fleet.service.cancel(job_id)
